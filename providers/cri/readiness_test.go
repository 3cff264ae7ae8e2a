package cri

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/provider"
)

// A pod is ready when its app containers and its sidecars are; an init
// container that completed is reported ready, as the kubelet reports it.
func TestReadinessCountsSidecarsAndCompletedInitContainers(t *testing.T) {
	running := func(id string) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{}}
	}
	exited := &runtimeapi.ContainerStatus{Id: "i", State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: &runtimeapi.ContainerMetadata{}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "init"},
			{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
		},
		Containers: []corev1.Container{{Name: "main"}},
	}}
	for _, sidecarReady := range []bool{false, true} {
		rec := &podRecord{ctrs: map[string]*ctrState{
			"init":  {cur: exited},
			"proxy": {cur: running("p"), probes: probeStates{started: true, ready: sidecarReady}},
			"main":  {cur: running("m"), probes: probeStates{started: true, ready: true}},
		}, sandboxReady: true, initDone: true, status: &corev1.PodStatus{}}
		s := computeStatus(rec, pod, "10.0.0.1")
		if !s.InitContainerStatuses[0].Ready {
			t.Errorf("a completed init container is not ready: %+v", s.InitContainerStatuses[0])
		}
		want := corev1.ConditionFalse
		if sidecarReady {
			want = corev1.ConditionTrue
		}
		for _, cond := range s.Conditions {
			if cond.Type != corev1.PodReady && cond.Type != corev1.ContainersReady {
				continue
			}
			if cond.Status != want {
				t.Errorf("sidecar ready %v: %s %s, want %s", sidecarReady, cond.Type, cond.Status, want)
			}
			if !sidecarReady && cond.Message != "containers with unready status: [proxy]" {
				t.Errorf("%s message %q", cond.Type, cond.Message)
			}
		}
	}
}

// A probe's terminationGracePeriodSeconds is the grace period of the kill it
// causes, unless the pod is being deleted with a grace period of its own.
func TestAProbesGracePeriodIsTheKillsGracePeriod(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(500))}}
	own := &corev1.Probe{TerminationGracePeriodSeconds: ptr.To(int64(5))}
	deleting := pod.DeepCopy()
	deleting.DeletionGracePeriodSeconds = ptr.To(int64(30))
	cases := []struct {
		name string
		pod  *corev1.Pod
		pr   *corev1.Probe
		want int64
	}{
		{"the probe's", pod, own, 5},
		{"the pod's when the probe sets none", pod, &corev1.Probe{}, 500},
		{"the deletion's", deleting, own, 30},
	}
	for _, c := range cases {
		got := withProbeGracePeriod(c.pod, c.pr)
		if s := int64(provider.GracePeriod(got).Seconds()); s != c.want {
			t.Errorf("%s: %ds, want %ds", c.name, s, c.want)
		}
	}
	if *pod.Spec.TerminationGracePeriodSeconds != 500 {
		t.Error("the pod was changed")
	}
}
