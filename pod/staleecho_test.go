package pod

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// A status check that runs before the controller's last write has come back
// through the watch compares the provider's status with a cached status older
// than the API's. If the provider's status is the one the cache still shows,
// the check finds nothing to write; the write's echo must then be checked
// again, not taken as the controller's own.
//
// This is what a SIGKILLed CRI node did to a pod running before the kill: the
// restarted provider first reported it ContainerCreating (it had not read the
// runtime yet), the start-up status check wrote that over the API's Running,
// and the provider's Running a moment later was checked against the cache,
// which still showed Running. Before the fix the pod stayed Pending in
// ContainerCreating for good, its container running.
func TestAStatusCheckedBeforeTheLastWriteCameBackIsCheckedAgain(t *testing.T) {
	running := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.1",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Unix(1000, 0)}}}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	creating := corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}

	apiPod := newPod("a")
	apiPod.Status = *running.DeepCopy()
	f := newFixture(t, apiPod)
	inProvider := apiPod.DeepCopy()
	f.provider.pods["ns/a"] = inProvider
	c, err := NewController(Config{
		Client: f.client, NodeName: testNode, Provider: f.provider, Recorder: f.recorder, Clock: f.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.c, f.ctx = c, t.Context()
	// The informer does not run: the test says what the cache holds and when
	// an update comes through the watch.
	cached := mustCompact(t, apiPod.DeepCopy())
	if err := c.pods.indexer.Add(cached); err != nil {
		t.Fatal(err)
	}
	if err := c.reconcileProvider(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.drainStatusChecks() // the start-up check: nothing to write

	// The provider reports the pod ContainerCreating: written.
	f.provider.mu.Lock()
	inProvider.Status = *creating.DeepCopy()
	f.provider.mu.Unlock()
	c.statusQueue.Add("ns/a")
	f.drainStatusChecks()
	written := f.apiStatus("ns/a")
	if written.Phase != corev1.PodPending {
		t.Fatalf("after the first check the API has phase %s, want Pending", written.Phase)
	}
	echo := mustCompact(t, f.apiPod("ns/a"))
	// The encoded REST client learns the written status's fingerprint from the
	// API server's answer; client-go's fake does not, so the test tells it.
	c.state.update("ns/a", func(s *podState) { s.echo.written, s.echo.pending = echo.StatusHash(), true })

	// The provider reports it Running again before the write comes back.
	f.provider.mu.Lock()
	inProvider.Status = *running.DeepCopy()
	notified := inProvider.DeepCopy()
	f.provider.mu.Unlock()
	c.handleProviderPod(notified)
	f.drainStatusChecks()

	// The write comes back through the watch.
	if err := c.pods.indexer.Update(echo); err != nil {
		t.Fatal(err)
	}
	c.handleUpdatedPod(cached, echo)
	f.drainStatusChecks()

	if got := f.apiStatus("ns/a"); got.Phase != corev1.PodRunning || got.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("the API has phase %s, container %+v; the provider reports Running", got.Phase, got.ContainerStatuses[0].State)
	}
}

func mustCompact(t *testing.T, p *corev1.Pod) *podwire.Pod {
	t.Helper()
	cp, err := podwire.Compact(p)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// drainStatusChecks runs the status checks queued, as the status workers would.
func (f *fixture) drainStatusChecks() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.c.statusQueue.Len() > 0 {
		if time.Now().After(deadline) {
			f.t.Fatal("status checks keep queuing more")
		}
		key, _ := f.c.statusQueue.Get()
		if err := f.c.statusHandler(f.ctx, key); err != nil {
			f.t.Fatalf("status check of %s: %v", key, err)
		}
		f.c.statusQueue.Done(key)
	}
}

func (f *fixture) apiPod(key string) *corev1.Pod {
	f.t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	p, err := f.client.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) apiStatus(key string) corev1.PodStatus { return f.apiPod(key).Status }
