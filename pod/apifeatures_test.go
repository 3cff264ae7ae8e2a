package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/provider"
)

// The tests of this file check what the node writes to an API server whose
// release lacks a status field (apifeatures): nothing of it, as that
// release's kubelet, so that no status check finds it missing and writes it
// again.

// A server that keeps no observedGeneration (before v1.34) gets none, in the
// status nor in the conditions, even one the provider set.
func TestNoObservedGenerationIsWrittenToAServerThatKeepsNone(t *testing.T) {
	p := &corev1.Pod{}
	p.Generation = 2
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: "example.com/Provisioned", Status: corev1.ConditionTrue, ObservedGeneration: 2},
	}}
	got := desiredStatus(p, fromProvider, nil, nil, apifeatures.Without(apifeatures.PodObservedGeneration), t0)
	if got.ObservedGeneration != 0 {
		t.Errorf("status.observedGeneration %d, want none", got.ObservedGeneration)
	}
	for _, c := range got.Conditions {
		if c.ObservedGeneration != 0 {
			t.Errorf("condition %s observes generation %d, want none", c.Type, c.ObservedGeneration)
		}
	}
	if fromProvider.Conditions[1].ObservedGeneration != 2 {
		t.Error("the provider's status was changed")
	}
	// The same pod against a server that keeps it.
	if got := desiredStatus(p, fromProvider, nil, nil, nil, t0); got.ObservedGeneration != 2 {
		t.Errorf("with every feature, status.observedGeneration %d, want 2", got.ObservedGeneration)
	}
}

// A server without the pod-level resources of the status (before v1.36) gets
// none; the containers' resources in effect are still reported.
func TestNoPodLevelResourcesAreWrittenToAServerWithoutThem(t *testing.T) {
	spec := cpuPod("100m").Spec
	spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}
	p := &corev1.Pod{Spec: spec}
	running := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}

	got := desiredStatus(p, fromProvider, nil, &spec, apifeatures.Without(apifeatures.PodLevelResourcesStatus), t0)
	if got.AllocatedResources != nil || got.Resources != nil {
		t.Errorf("pod-level allocatedResources %v, resources %v; want none", got.AllocatedResources, got.Resources)
	}
	if r := got.ContainerStatuses[0].Resources; r == nil || r.Requests.Cpu().String() != "100m" {
		t.Errorf("container status %+v; want 100m in effect", got.ContainerStatuses[0])
	}
	if got := desiredStatus(p, fromProvider, nil, &spec, nil, t0); got.Resources == nil || got.Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("with every feature, pod-level resources %v; want 200m", got.Resources)
	}
}

// resizer is a provider that resizes pods in place.
type resizer struct{ provider.PodLifecycleHandler }

func (resizer) ResizesInPlace() bool { return true }

// On a server without in-place resize (pods/resize, v1.33's API) a provider
// that resizes in place is reported as one that does not: no container
// resources in the statuses, which the server would drop.
func TestAServerWithoutInPlaceResizeIsReportedAsAKubeletWithoutIt(t *testing.T) {
	for _, tc := range []struct {
		features *apifeatures.Set
		want     bool
	}{
		{nil, true},
		{apifeatures.Without(apifeatures.PodObservedGeneration), true},
		{apifeatures.Without(apifeatures.InPlaceResize), false},
	} {
		c := &Controller{provider: resizer{}, features: tc.features}
		if got := c.resizesInPlace(); got != tc.want {
			t.Errorf("features off %v: resizesInPlace() = %v, want %v", tc.features.Off(), got, tc.want)
		}
	}
}
