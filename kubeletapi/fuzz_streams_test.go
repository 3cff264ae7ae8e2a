package kubeletapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/provider"
)

// streamsProvider implements every optional interface the stream and stats
// routes call, answering at once.
type streamsProvider struct{ fuzzProvider }

func (streamsProvider) RunInContainer(context.Context, string, string, string, []string, provider.AttachIO) error {
	return nil
}
func (streamsProvider) AttachToContainer(context.Context, string, string, string, provider.AttachIO) error {
	return nil
}
func (streamsProvider) PortForward(_ context.Context, _, _ string, _ int32, s io.ReadWriteCloser) error {
	return s.Close()
}
func (streamsProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "n1"}}, nil
}
func (streamsProvider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	name := "node_cpu_usage_seconds_total"
	return []*dto.MetricFamily{{Name: &name, Type: dto.MetricType_COUNTER.Enum()}}, nil
}

// FuzzStreamUpgrades sends authorized requests with arbitrary upgrade headers and
// queries to the exec, attach and port-forward routes (their SPDY and WebSocket
// upgrade paths) and to the stats and metrics handlers: any answer is fine but a
// panic, a hang or a status outside HTTP's.
func FuzzStreamUpgrades(f *testing.F) {
	for _, s := range []struct{ path, upgrade, protocol string }{
		{"/exec/a/b/c?command=ls&output=1", "SPDY/3.1", "v4.channel.k8s.io"},
		{"/exec/a/b/u/c?command=sh&input=1&tty=1", "websocket", "v5.channel.k8s.io"},
		{"/attach/a/b/c?output=1&error=1", "SPDY/3.1", "v3.channel.k8s.io"},
		{"/portForward/a/b?port=80", "SPDY/3.1", "portforward.k8s.io"},
		{"/portForward/a/b/u", "websocket", "v4.channel.k8s.io"},
		{"/stats/summary?only_cpu_and_memory=true", "", ""},
		{"/metrics/resource", "", ""},
	} {
		f.Add("POST", s.path, s.upgrade, s.protocol)
		f.Add("GET", s.path, s.upgrade, s.protocol)
	}
	auth := &fixedAuth{}
	// Short stream timeouts: an upgrade the recorder cannot complete waits for them.
	s, err := NewServer(Config{NodeName: "n1", Provider: streamsProvider{}, Authenticator: auth, Authorizer: authorizer.AuthorizerFunc(auth.Authorize),
		StreamCreationTimeout: 100 * time.Millisecond, StreamIdleTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Fuzz(func(t *testing.T, method, target, upgrade, protocol string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || !validMethod(method) {
			return
		}
		hdr := http.Header{"Authorization": {"Bearer good"}}
		if upgrade != "" {
			hdr.Set("Connection", "Upgrade")
			hdr.Set("Upgrade", upgrade)
			hdr.Set("X-Stream-Protocol-Version", protocol)
			hdr.Set("Sec-Websocket-Protocol", protocol)
			hdr.Set("Sec-Websocket-Version", "13")
			hdr.Set("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := (&http.Request{Method: method, URL: u, Header: hdr, RequestURI: target, Host: "n1"}).WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code < 200 || w.Code >= 600 {
			t.Fatalf("%s %s (Upgrade %q, protocol %q): status %d", method, target, upgrade, protocol, w.Code)
		}
	})
}
