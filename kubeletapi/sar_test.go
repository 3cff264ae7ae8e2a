package kubeletapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// reviewer is an API server's SubjectAccessReview endpoint: answer decides, and
// every review asked is kept.
type reviewer struct {
	asked  []authorizationv1.SubjectAccessReviewSpec
	answer func(spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

func (r *reviewer) authorizer(clk *clocktesting.FakeClock) *accessReviews {
	client := fake.NewClientset()
	client.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		review := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		r.asked = append(r.asked, review.Spec)
		status, err := r.answer(review.Spec)
		if err != nil {
			return true, nil, err
		}
		return true, &authorizationv1.SubjectAccessReview{Spec: review.Spec, Status: status}, nil
	})
	return newAccessReviews(client.AuthorizationV1().SubjectAccessReviews(), 5*time.Minute, 30*time.Second,
		wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}, clk)
}

func logsOf(name string, groups ...string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: name, UID: "u-" + name, Groups: groups, Extra: map[string][]string{"scopes": {"a"}}},
		Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: "log", Name: "n1", ResourceRequest: true, Path: "/logs/",
	}
}

func TestAnAccessReviewAsksWhatTheKubeletAsks(t *testing.T) {
	r := &reviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed"}, nil
	}}
	z := r.authorizer(clocktesting.NewFakeClock(time.Now()))
	decision, reason, err := z.Authorize(context.Background(), logsOf("alice", "devs", "system:authenticated"))
	if err != nil || decision != authorizer.DecisionAllow || reason != "RBAC: allowed" {
		t.Fatalf("Authorize = %v, %q, %v; want allowed with the API server's reason", decision, reason, err)
	}
	if len(r.asked) != 1 {
		t.Fatalf("%d reviews asked, want 1", len(r.asked))
	}
	got := r.asked[0]
	want := authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "nodes", Subresource: "log", Name: "n1"}
	if got.User != "alice" || got.UID != "u-alice" || strings.Join(got.Groups, ",") != "devs,system:authenticated" ||
		len(got.Extra["scopes"]) != 1 || got.ResourceAttributes == nil || *got.ResourceAttributes != want || got.NonResourceAttributes != nil {
		t.Errorf("review asked %+v (resource %+v), want alice's get on nodes/n1/log", got, got.ResourceAttributes)
	}

	nonResource := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "bob"}, Verb: "get", Path: "/healthz"}
	if _, _, err := z.Authorize(context.Background(), nonResource); err != nil {
		t.Fatal(err)
	}
	if got := r.asked[1]; got.ResourceAttributes != nil || got.NonResourceAttributes == nil ||
		*got.NonResourceAttributes != (authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}) {
		t.Errorf("non-resource review asked %+v, want get on /healthz", got)
	}
}

func TestAnAccessReviewsDecisionIsTheAPIServers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status authorizationv1.SubjectAccessReviewStatus
		want   authorizer.Decision
		err    bool
	}{
		{"allowed", authorizationv1.SubjectAccessReviewStatus{Allowed: true}, authorizer.DecisionAllow, false},
		{"denied", authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "no"}, authorizer.DecisionDeny, false},
		{"no opinion", authorizationv1.SubjectAccessReviewStatus{Reason: "no rule"}, authorizer.DecisionNoOpinion, false},
		{"both", authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}, authorizer.DecisionDeny, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &reviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
				return tc.status, nil
			}}
			decision, reason, err := r.authorizer(clocktesting.NewFakeClock(time.Now())).Authorize(context.Background(), logsOf("alice"))
			if decision != tc.want || reason != tc.status.Reason || (err != nil) != tc.err {
				t.Errorf("Authorize = %v, %q, %v; want %v, %q, error %v", decision, reason, err, tc.want, tc.status.Reason, tc.err)
			}
		})
	}
}

func TestAnAllowIsCachedFiveMinutesAndADenialThirtySeconds(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := &reviewer{answer: func(spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: spec.User == "alice"}, nil
	}}
	z := r.authorizer(clk)
	ask := func(name string) {
		t.Helper()
		if _, _, err := z.Authorize(context.Background(), logsOf(name)); err != nil {
			t.Fatal(err)
		}
	}
	ask("alice")
	ask("mallory")
	clk.Step(29 * time.Second)
	ask("alice")
	ask("mallory")
	if len(r.asked) != 2 {
		t.Fatalf("%d reviews within 29 s, want 2 (both answers cached)", len(r.asked))
	}
	clk.Step(2 * time.Second)
	ask("alice")
	ask("mallory")
	if len(r.asked) != 3 || r.asked[2].User != "mallory" {
		t.Fatalf("reviews after 31 s: %d, want mallory's asked again and alice's still cached", len(r.asked))
	}
	clk.Step(5 * time.Minute)
	ask("alice")
	if len(r.asked) != 4 {
		t.Fatalf("alice's allow was not asked again after 5 min 31 s")
	}

	// The attributes a caller controls are too large: asked every time.
	huge := logsOf("alice")
	huge.Name = strings.Repeat("x", maxCachedAttributes)
	for range 2 {
		if _, _, err := z.Authorize(context.Background(), huge); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.asked) != 6 {
		t.Errorf("%d reviews, want the request with a %d-byte name asked twice", len(r.asked), len(huge.Name))
	}
}

func TestAFailedAccessReviewIsRetriedThenHasNoOpinion(t *testing.T) {
	unavailable := apierrors.NewInternalError(errors.New("etcd is away"))
	fails := 2
	r := &reviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		if fails > 0 {
			fails--
			return authorizationv1.SubjectAccessReviewStatus{}, unavailable
		}
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil
	}}
	z := r.authorizer(clocktesting.NewFakeClock(time.Now()))
	if decision, _, err := z.Authorize(context.Background(), logsOf("alice")); decision != authorizer.DecisionAllow || err != nil {
		t.Fatalf("after two 500s: %v, %v; want allowed on the third try", decision, err)
	}

	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
	r.asked = nil
	r.answer = func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{}, forbidden
	}
	decision, _, err := z.Authorize(context.Background(), logsOf("bob"))
	if decision != authorizer.DecisionNoOpinion || !apierrors.IsForbidden(err) || len(r.asked) != 1 {
		t.Errorf("a 403 from the API server: %v, %v after %d reviews; want no opinion with the error, not retried", decision, err, len(r.asked))
	}
	r.asked = nil
	r.answer = func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{}, unavailable
	}
	decision, _, err = z.Authorize(context.Background(), logsOf("carol"))
	if decision != authorizer.DecisionNoOpinion || err == nil || len(r.asked) != 3 {
		t.Errorf("500s throughout: %v, %v after %d reviews; want no opinion with the error after 3", decision, err, len(r.asked))
	}
}
