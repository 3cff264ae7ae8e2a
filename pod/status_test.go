package pod

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Hour))
)

func running(name string, since metav1.Time, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}}
}

func TestAPodStartedAgainByAProviderThatLostItCountsARestart(t *testing.T) {
	api := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t0,
		ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 0)}}
	// What a provider that lost the pod reports once it is created again.
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t1,
		ContainerStatuses: []corev1.ContainerStatus{running("app", metav1.NewTime(t1.Add(1500*time.Millisecond)), 0)}}

	got := mergeStatus(api, fromProvider, nil)
	if !got.StartTime.Equal(&t0) {
		t.Errorf("startTime %v, want the first one %v", got.StartTime, t0)
	}
	cs := got.ContainerStatuses[0]
	if cs.RestartCount != 1 {
		t.Errorf("restartCount %d, want 1", cs.RestartCount)
	}
	last := cs.LastTerminationState.Terminated
	if last == nil || last.Reason != reasonContainerStatusUnknown || last.ExitCode != exitCodeContainerUnknown || !last.StartedAt.Equal(&t0) {
		t.Errorf("lastState %+v, want the lost instance, terminated with %s", cs.LastTerminationState, reasonContainerStatusUnknown)
	}
	if fromProvider.ContainerStatuses[0].RestartCount != 0 {
		t.Error("the provider's status was changed")
	}

	// The same instance reported again (the API keeps seconds only): nothing more.
	written := got
	written.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t1.Add(time.Second))
	again := mergeStatus(written, fromProvider, nil)
	if n := again.ContainerStatuses[0].RestartCount; n != 1 {
		t.Errorf("restartCount after the same report: %d, want 1", n)
	}
	if again.ContainerStatuses[0].LastTerminationState.Terminated == nil {
		t.Error("lastState lost after the same report")
	}
}

func TestAProviderThatCountsItsRestartsIsTakenAsItIs(t *testing.T) {
	api := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 2)}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: t0, FinishedAt: t1}}
	pc := running("app", t1, 3)
	pc.LastTerminationState = exited
	got := mergeStatus(api, &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{pc}}, nil)
	if cs := got.ContainerStatuses[0]; cs.RestartCount != 3 || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("got restartCount %d, lastState %+v; want the provider's 3 and exit code 1", cs.RestartCount, cs.LastTerminationState)
	}
}

func TestARestartCountNeverGoesBack(t *testing.T) {
	waiting := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	api := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 4)}}
	got := mergeStatus(api, &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting}}, nil)
	if cs := got.ContainerStatuses[0]; cs.RestartCount != 4 || cs.State.Waiting == nil {
		t.Errorf("got restartCount %d, state %+v; want 4 and the provider's waiting state", cs.RestartCount, cs.State)
	}
}

func TestAFirstStatusTakesTheProvidersStartTimeAndCounts(t *testing.T) {
	got := mergeStatus(corev1.PodStatus{Phase: corev1.PodPending}, &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t1,
		ContainerStatuses: []corev1.ContainerStatus{running("app", t1, 0)}}, nil)
	if !got.StartTime.Equal(&t1) || got.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("got startTime %v, restartCount %d; want %v and 0", got.StartTime, got.ContainerStatuses[0].RestartCount, t1)
	}
}
