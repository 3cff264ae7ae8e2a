package kubeletapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// podLister is a provider that runs the given pods.
type podLister struct{ pods []*corev1.Pod }

func (p podLister) CreatePod(context.Context, *corev1.Pod) error { return nil }
func (p podLister) UpdatePod(context.Context, *corev1.Pod) error { return nil }
func (p podLister) DeletePod(context.Context, *corev1.Pod) error { return nil }
func (p podLister) GetPod(context.Context, string, string) (*corev1.Pod, error) {
	return nil, errors.New("not used")
}
func (p podLister) GetPodStatus(context.Context, string, string) (*corev1.PodStatus, error) {
	return nil, errors.New("not used")
}
func (p podLister) GetPods(context.Context) ([]*corev1.Pod, error) { return p.pods, nil }

func TestRunningPodsShowWhatTheProviderRunsAndNothingElse(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID("u1"), Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27",
			Env: []corev1.EnvVar{{Name: "SECRET", Value: "s3cr3t"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	auth := &fixedAuth{}
	h := newTestServer(t, podLister{pods: []*corev1.Pod{pod}}, auth)
	w := do(h, "GET", "/runningpods/", "good")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), "s3cr3t") || strings.Contains(w.Body.String(), "Running") {
		t.Errorf("/runningpods/ shows more than the running pod's identity and containers: %s", w.Body)
	}
	var list corev1.PodList
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d pods, want 1", len(list.Items))
	}
	got := list.Items[0]
	if got.Namespace != "ns" || got.Name != "web" || got.UID != "u1" || len(got.Spec.Containers) != 1 ||
		got.Spec.Containers[0].Name != "c" || got.Spec.Containers[0].Image != "nginx:1.27" {
		t.Errorf("running pod = %+v", got)
	}
	if a := auth.seen[len(auth.seen)-1]; a.GetSubresource() != "proxy" || a.GetVerb() != "get" {
		t.Errorf("authorized as %s nodes/%s, want get nodes/proxy", a.GetVerb(), a.GetSubresource())
	}
}

func TestMetricsAndReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "vkubelet_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady error = errors.New("lease last renewed 50s ago")
	auth := &fixedAuth{}
	s, err := NewServer(Config{NodeName: "n1", Provider: podLister{}, Authenticator: auth, Authorizer: authorizer.AuthorizerFunc(auth.Authorize),
		Gatherer: reg, Ready: func() error { return notReady }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	w := do(h, "GET", "/metrics", "good")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "vkubelet_test_total 3") {
		t.Errorf("/metrics: %d %s", w.Code, w.Body)
	}
	if a := auth.seen[len(auth.seen)-1]; a.GetSubresource() != "metrics" {
		t.Errorf("/metrics authorized as nodes/%s, want nodes/metrics", a.GetSubresource())
	}
	if w := do(h, "GET", "/readyz", "good"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "50s ago") {
		t.Errorf("/readyz while not ready: %d %s", w.Code, w.Body)
	}
	notReady = nil
	if w := do(h, "GET", "/readyz", "good"); w.Code != http.StatusOK {
		t.Errorf("/readyz when ready: %d %s", w.Code, w.Body)
	}
}
