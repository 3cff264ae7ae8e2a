package pod

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

func TestTheActiveDeadlineCountsFromTheStartTime(t *testing.T) {
	now := t0.Add(90 * time.Second)
	withDeadline := func(ads *int64, start *metav1.Time, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: ads}, Status: corev1.PodStatus{Phase: phase, StartTime: start}}
	}
	running := &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t1}
	cases := []struct {
		name         string
		pod          *corev1.Pod
		fromProvider *corev1.PodStatus
		left         time.Duration
		ok           bool
	}{
		{"no deadline", withDeadline(nil, &t0, corev1.PodRunning), running, 0, false},
		{"from the API's start time", withDeadline(ptr.To[int64](120), &t0, corev1.PodRunning), running, 30 * time.Second, true},
		{"passed", withDeadline(ptr.To[int64](60), &t0, corev1.PodRunning), running, -30 * time.Second, true},
		{"the provider's start time before the API has one", withDeadline(ptr.To[int64](60), nil, corev1.PodPending),
			&corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t0}, -30 * time.Second, true},
		{"no start time anywhere", withDeadline(ptr.To[int64](60), nil, corev1.PodPending), &corev1.PodStatus{Phase: corev1.PodPending}, 0, false},
		{"finished in the API", withDeadline(ptr.To[int64](60), &t0, corev1.PodSucceeded), running, 0, false},
		{"finished in the provider", withDeadline(ptr.To[int64](60), &t0, corev1.PodRunning), &corev1.PodStatus{Phase: corev1.PodSucceeded}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			left, ok := deadlineLeft(tc.pod, tc.fromProvider, now)
			if left != tc.left || ok != tc.ok {
				t.Errorf("deadlineLeft = %v, %v; want %v, %v", left, ok, tc.left, tc.ok)
			}
		})
	}
}

// A pod the node ended keeps its phase and reason while its containers' last
// states still come from the provider.
func TestATerminalPodKeepsWhatEndedIt(t *testing.T) {
	api := corev1.PodStatus{Phase: corev1.PodFailed, Reason: ReasonDeadlineExceeded, Message: "ran too long",
		ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 0)}}
	exited := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, StartedAt: t0, FinishedAt: t1}}}
	got := mergeStatus(api, &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{exited}}, statusSpec{})
	if got.Phase != corev1.PodFailed || got.Reason != ReasonDeadlineExceeded || got.Message != "ran too long" {
		t.Errorf("phase %s, reason %q, message %q; want the API's", got.Phase, got.Reason, got.Message)
	}
	if term := got.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 143 {
		t.Errorf("container state %+v, want the provider's exit 143", got.ContainerStatuses[0].State)
	}
}

// A pod stopped at its deadline that the provider then forgets is not started
// again, and its containers are shown terminated for the deadline.
func TestAPodStoppedAtItsDeadlineAndForgottenStaysFailed(t *testing.T) {
	p := newPod("a")
	p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
	f := newFixture(t, p)
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	started := metav1.NewTime(f.clock.Now().Add(-2 * time.Minute)) // past the deadline
	f.provider.mu.Lock()
	f.provider.pods["ns/a"].Status.StartTime = &started
	f.provider.mu.Unlock()

	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 2 || got[1] != "DeletePod ns/a" {
		t.Fatalf("provider calls = %v, want CreatePod then DeletePod", got)
	}
	if ev := <-f.recorder.Events; !strings.HasPrefix(ev, "Normal "+ReasonDeadlineExceeded) {
		t.Errorf("Event %q, want a Normal %s (the kubelet's type)", ev, ReasonDeadlineExceeded)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == ReasonDeadlineExceeded
	})

	f.provider.mu.Lock()
	delete(f.provider.pods, "ns/a")
	f.provider.mu.Unlock()
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == corev1.PodFailed && len(cs) == 1 && cs[0].State.Terminated != nil &&
			cs[0].State.Terminated.Reason == ReasonDeadlineExceeded
	})
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 2 {
		t.Errorf("provider calls after the provider forgot the pod = %v; want none more", got)
	}
}

// A finished pod is not Ready, whatever its provider last said, and saying so
// again writes nothing.
func TestAFinishedPodIsNotReady(t *testing.T) {
	ready := func(t metav1.Time) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t}}
	}
	api := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready(t0)}
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready(t0)}
	stopped := fromProvider.DeepCopy()
	stopped.Phase, stopped.Reason = corev1.PodFailed, ReasonDeadlineExceeded
	desired := mergeStatus(api, stopped, statusSpec{})
	finishedNotReady(&api, &desired, t1)
	for _, c := range desired.Conditions {
		if c.Status != corev1.ConditionFalse || c.Reason != reasonPodCompleted || !c.LastTransitionTime.Equal(&t1) {
			t.Errorf("%s = %+v; want False, %s, since %v", c.Type, c, reasonPodCompleted, t1)
		}
	}
	// The provider still says ready while its containers stop.
	again := mergeStatus(desired, fromProvider, statusSpec{})
	finishedNotReady(&desired, &again, metav1.NewTime(t1.Add(time.Minute)))
	if patch, err := statuspatch.Build("uid", &desired, &again); err != nil || patch != nil {
		t.Errorf("second check patches %s (%v); want nothing", patch, err)
	}
}

// A pod that waits for a missing ConfigMap gets a start time with its first
// status, as on a kubelet, and its deadline counts from it: once past, the pod
// fails with DeadlineExceeded without the provider ever hearing of it, and the
// ConfigMap appearing then starts nothing.
func TestAPodWaitingForAReferenceFailsAtItsDeadline(t *testing.T) {
	p := projectedPod()
	p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
	f := newFixture(t, p)
	prov := f.startResolving()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	<-f.recorder.Events // MandatoryConfigMapNotFound
	f.waitCached("ns/a", func(p *corev1.Pod) bool {
		return p.Status.StartTime != nil && p.Status.StartTime.Time.Equal(f.clock.Now())
	})
	// Before the deadline another sync waits, as before.
	f.clock.Step(59 * time.Second)
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	<-f.recorder.Events
	if api := f.apiStatus("ns/a"); api.Phase != corev1.PodPending {
		t.Fatalf("phase %s before the deadline, want Pending", api.Phase)
	}
	f.clock.Step(time.Second)
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if ev := <-f.recorder.Events; !strings.HasPrefix(ev, "Normal "+ReasonDeadlineExceeded) {
		t.Errorf("Event %q, want a Normal %s", ev, ReasonDeadlineExceeded)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	api := f.apiStatus("ns/a")
	if api.Reason != ReasonDeadlineExceeded || len(api.ContainerStatuses) != 1 || api.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("status %s (%s), containers %+v; want DeadlineExceeded with the container still waiting", api.Phase, api.Reason, api.ContainerStatuses)
	}

	if _, err := f.client.CoreV1().ConfigMaps("ns").Create(f.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := prov.callList(); len(got) != 0 {
		t.Errorf("provider calls = %v, want none", got)
	}
}

// A pod the provider keeps refusing gets its start time from the first
// ProviderFailed status, and fails at its deadline like any other.
func TestAPodTheProviderRefusesFailsAtItsDeadline(t *testing.T) {
	p := newPod("a")
	p.Spec.ActiveDeadlineSeconds = ptr.To[int64](30)
	f := newFixture(t, p)
	f.start()
	f.provider.failNext["CreatePod"] = errdefs.Unavailable("backend is down")
	if err := f.c.syncHandler(f.ctx, "ns/a"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("sync error = %v, want the provider's", err)
	}
	<-f.recorder.Events // ProviderFailed
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.StartTime != nil })
	f.clock.Step(31 * time.Second)
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == ReasonDeadlineExceeded
	})
	if got := f.provider.callList(); len(got) != 1 {
		t.Errorf("provider calls = %v, want none after the failed CreatePod", got)
	}
}
