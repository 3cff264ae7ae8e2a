package kubeletapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

func TestParseLogOptions(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		query   string
		want    provider.ContainerLogOpts
		wantErr string
	}{
		{"", provider.ContainerLogOpts{}, ""},
		{"follow=true&timestamps=1&previous=false", provider.ContainerLogOpts{Follow: true, Timestamps: true}, ""},
		{"tailLines=0", provider.ContainerLogOpts{Tail: 0, TailSet: true}, ""},
		{"tailLines=10&limitBytes=5", provider.ContainerLogOpts{Tail: 10, TailSet: true, LimitBytes: 5}, ""},
		{"sinceSeconds=30", provider.ContainerLogOpts{SinceSeconds: 30}, ""},
		{"sinceTime=2026-01-02T03:04:05Z", provider.ContainerLogOpts{SinceTime: &since}, ""},
		{"tailLines=-1", provider.ContainerLogOpts{}, "tailLines"},
		{"limitBytes=0", provider.ContainerLogOpts{}, "limitBytes"},
		{"sinceSeconds=0", provider.ContainerLogOpts{}, "sinceSeconds"},
		{"sinceTime=yesterday", provider.ContainerLogOpts{}, "sinceTime"},
		{"sinceSeconds=5&sinceTime=2026-01-02T03:04:05Z", provider.ContainerLogOpts{}, "at most one"},
		{"follow=maybe", provider.ContainerLogOpts{}, "follow"},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			got, err := parseLogOptions(q)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.SinceTime != nil && (tc.want.SinceTime == nil || !got.SinceTime.Equal(*tc.want.SinceTime)) {
				t.Fatalf("sinceTime = %v", got.SinceTime)
			}
			got.SinceTime, tc.want.SinceTime = nil, nil
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSubresourceAndVerbLikeTheKubelet(t *testing.T) {
	cases := map[string]string{
		"/stats/summary": "stats", "/stats": "stats", "/metrics/resource": "metrics", "/metrics": "metrics",
		"/logs/messages": "log", "/exec/ns/p/c": "proxy", "/containerLogs/ns/p/c": "proxy",
		"/pods": "proxy", "/portForward/ns/p": "proxy", "/statsx": "proxy", "/healthz": "proxy",
	}
	for path, want := range cases {
		if got := subresourceFor(path); got != want {
			t.Errorf("subresourceFor(%q) = %q, want %q", path, got, want)
		}
	}
	for method, want := range map[string]string{"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "OPTIONS": ""} {
		if got := verbFor(method); got != want {
			t.Errorf("verbFor(%s) = %q, want %q", method, got, want)
		}
	}
}

// fixedAuth authenticates a bearer token "good" (or "other") and allows what allow says.
type fixedAuth struct {
	allow func(authorizer.Attributes) bool
	seen  []authorizer.Attributes
}

func (f *fixedAuth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	switch r.Header.Get("Authorization") {
	case "Bearer good":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
	case "Bearer anon":
		return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous}}, true, nil
	}
	return nil, false, nil
}

func (f *fixedAuth) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.seen = append(f.seen, a)
	if f.allow == nil || f.allow(a) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionDeny, "no", nil
}

// logsOnly is a provider with nothing but logs.
type logsOnly struct{ err error }

func (l logsOnly) GetContainerLogs(_ context.Context, ns, pod, container string, o provider.ContainerLogOpts) (io.ReadCloser, error) {
	if l.err != nil {
		return nil, l.err
	}
	return io.NopCloser(strings.NewReader(ns + "/" + pod + "/" + container + "\n")), nil
}

func newTestServer(t testing.TB, p any, auth *fixedAuth) http.Handler {
	t.Helper()
	s, err := NewServer(Config{NodeName: "n1", Provider: p, Authenticator: auth, Authorizer: authorizer.AuthorizerFunc(auth.Authorize),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

func do(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAuthenticationAndAuthorization(t *testing.T) {
	auth := &fixedAuth{allow: func(a authorizer.Attributes) bool { return a.GetSubresource() != "proxy" }}
	h := newTestServer(t, logsOnly{}, auth)
	if w := do(h, "GET", "/stats/summary", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d", w.Code)
	}
	if w := do(h, "GET", "/stats/summary", "anon"); w.Code != http.StatusUnauthorized {
		t.Fatalf("anonymous user: %d", w.Code)
	}
	if w := do(h, "POST", "/exec/ns/p/c?command=ls&output=1", "good"); w.Code != http.StatusForbidden {
		t.Fatalf("exec without nodes/proxy: %d", w.Code)
	}
	a := auth.seen[len(auth.seen)-1]
	if a.GetVerb() != "create" || a.GetResource() != "nodes" || a.GetSubresource() != "proxy" || a.GetName() != "n1" || a.GetUser().GetName() != "alice" {
		t.Fatalf("attributes = %+v", a)
	}
}

func TestMissingProviderInterfacesAnswer501(t *testing.T) {
	h := newTestServer(t, struct{}{}, &fixedAuth{})
	for _, target := range []string{"/stats/summary", "/metrics/resource", "/pods", "/containerLogs/ns/p/c",
		"/exec/ns/p/c?command=ls&output=1", "/attach/ns/p/c?output=1", "/portForward/ns/p"} {
		if w := do(h, "GET", target, "good"); w.Code != http.StatusNotImplemented {
			t.Errorf("GET %s: %d %q, want 501", target, w.Code, w.Body.String())
		}
	}
}

func TestProviderErrorsMapToStatuses(t *testing.T) {
	cases := []struct {
		err  error
		code int
	}{
		{nil, http.StatusOK},
		{errdefs.NotFound("no such pod"), http.StatusNotFound},
		{errdefs.InvalidInput("container not running"), http.StatusBadRequest},
		{errdefs.NotImplemented("previous logs"), http.StatusNotImplemented},
		{errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, tc := range cases {
		h := newTestServer(t, logsOnly{err: tc.err}, &fixedAuth{})
		w := do(h, "GET", "/containerLogs/ns/pod/ctr?tailLines=3", "good")
		if w.Code != tc.code {
			t.Errorf("provider error %v: %d, want %d", tc.err, w.Code, tc.code)
		}
		if tc.err == nil && w.Body.String() != "ns/pod/ctr\n" {
			t.Errorf("body = %q", w.Body.String())
		}
	}
	h := newTestServer(t, logsOnly{}, &fixedAuth{})
	if w := do(h, "GET", "/containerLogs/ns/pod/ctr?tailLines=-2", "good"); w.Code != http.StatusBadRequest {
		t.Errorf("bad tailLines: %d, want 400", w.Code)
	}
}

// FuzzParseLogOptions: any query either fails cleanly or yields options that obey
// the kubelet's rules.
func FuzzParseLogOptions(f *testing.F) {
	for _, s := range []string{"", "follow=true", "tailLines=5&limitBytes=10", "sinceSeconds=1", "sinceTime=2026-01-01T00:00:00Z", "tailLines=-1", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, err := parseLogOptions(q)
		if err != nil {
			return
		}
		if o.Tail < 0 || o.LimitBytes < 0 || o.SinceSeconds < 0 || (o.SinceSeconds != 0 && o.SinceTime != nil) || (!o.TailSet && o.Tail != 0) {
			t.Fatalf("%q parsed to invalid options %+v", raw, o)
		}
	})
}

// FuzzRoutes: any path and query, through authentication, routing and parsing, is
// answered with a sensible status and never panics.
func FuzzRoutes(f *testing.F) {
	for _, s := range []string{"/containerLogs/a/b/c?tailLines=1", "/exec/a/b/c?command=x&output=1", "/exec/a/b/u/c",
		"/attach/a/b/c", "/portForward/a/b", "/stats/summary", "/pods", "/../pods", "//exec", "/containerLogs/a/b/c?sinceTime=x"} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	h := newTestServer(f, fuzzProvider{}, &fixedAuth{})
	f.Fuzz(func(t *testing.T, method, target string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || !validMethod(method) {
			return
		}
		r := &http.Request{Method: method, URL: u, Header: http.Header{"Authorization": {"Bearer good"}}, RequestURI: target}
		r = r.WithContext(context.Background())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code < 200 || w.Code >= 600 {
			t.Fatalf("%s %s: status %d", method, target, w.Code)
		}
	})
}

func validMethod(m string) bool {
	switch m {
	case "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD":
		return true
	}
	return false
}

type fuzzProvider struct{ logsOnly }

func (fuzzProvider) GetPods(context.Context) ([]*corev1.Pod, error) { return nil, nil }
