package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func cpuPod(cpu string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

func TestAResizeIsPlannedAgainstWhatRuns(t *testing.T) {
	refused := &resizeState{allocated: resourcesOf(cpuPod("100m")), refused: resourcesOf(cpuPod("300m")), why: "no"}
	failed := &resizeState{allocated: resourcesOf(cpuPod("100m")), refused: resourcesOf(cpuPod("300m")), why: "usage", failed: true}
	cases := []struct {
		name         string
		p, last      *corev1.Pod
		rs           *resizeState
		resizing     bool
		sendCPU      string
		afterRefused bool // the record after an accepted update still has a refusal
		afterNil     bool
	}{
		{"no change of resources", cpuPod("100m"), cpuPod("100m"), nil, false, "100m", false, true},
		{"a resize", cpuPod("200m"), cpuPod("100m"), nil, true, "200m", false, false},
		{"the refused resize is not asked again", cpuPod("300m"), cpuPod("300m"), refused, false, "100m", true, false},
		{"another resize is asked", cpuPod("400m"), cpuPod("300m"), refused, true, "400m", false, false},
		{"back to what runs", cpuPod("100m"), cpuPod("300m"), refused, false, "100m", false, false},
		{"a failed resize is asked again", cpuPod("300m"), cpuPod("300m"), failed, true, "300m", false, false},
		{"back to what runs after a failure", cpuPod("100m"), cpuPod("300m"), failed, false, "100m", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan := planResize(tc.p, tc.last, tc.rs)
			sent := plan.send.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
			if plan.resizing != tc.resizing || sent.String() != tc.sendCPU {
				t.Errorf("resizing %v, sends cpu %s; want %v, %s", plan.resizing, sent.String(), tc.resizing, tc.sendCPU)
			}
			after := plan.after(tc.rs)
			if (after == nil) != tc.afterNil || (after != nil && (after.refused != nil) != tc.afterRefused) {
				t.Errorf("record after the update %+v", after)
			}
		})
	}
}

func TestTheStatusSaysWhatRunsAndWhatIsPending(t *testing.T) {
	spec := cpuPod("100m").Spec
	running := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}

	// A provider that does not resize: no resources, no condition.
	out := mergeStatus(corev1.PodStatus{}, fromProvider, statusSpec{})
	if out.ContainerStatuses[0].Resources != nil || len(out.Conditions) != 0 {
		t.Errorf("status %+v; want no resources nor conditions", out)
	}
	// One that does: the spec's resources run.
	out = mergeStatus(corev1.PodStatus{}, fromProvider, statusSpec{running: &spec})
	if r := out.ContainerStatuses[0].Resources; r == nil || r.Requests.Cpu().String() != "100m" ||
		out.ContainerStatuses[0].AllocatedResources.Cpu().String() != "100m" {
		t.Errorf("container status %+v; want 100m allocated and in effect", out.ContainerStatuses[0])
	}
	// Nothing changed since: the API's status says it, and a check that did not
	// read the spec keeps it.
	if !reportsResources(&out) {
		t.Fatalf("status %+v does not report its resources", out)
	}
	again := mergeStatus(out, fromProvider, statusSpec{})
	if r := again.ContainerStatuses[0].Resources; r == nil || r.Requests.Cpu().String() != "100m" {
		t.Errorf("container status %+v; want the API's 100m kept", again.ContainerStatuses[0])
	}
	// A refused resize: pending, with what still runs.
	rs := &resizeState{allocated: resourcesOf(cpuPod("100m")), refused: resourcesOf(cpuPod("300m")), why: "cannot", since: t1}
	grown := cpuPod("300m").Spec
	out = mergeStatus(corev1.PodStatus{}, fromProvider, statusSpec{running: &grown, resize: rs, generation: 2})
	c := findCondition(out.Conditions, corev1.PodResizePending)
	if c == nil || c.Reason != corev1.PodReasonInfeasible || c.Message != "cannot" || c.ObservedGeneration != 2 ||
		out.ContainerStatuses[0].Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("status %+v; want PodResizePending Infeasible and 100m in effect", out)
	}
	// Nothing pending any more: the condition goes, unless the provider reports one.
	out = mergeStatus(out, fromProvider, statusSpec{running: &spec})
	if findCondition(out.Conditions, corev1.PodResizePending) != nil {
		t.Errorf("conditions %+v; want no PodResizePending", out.Conditions)
	}
	// A failed resize: in progress with the error, and what still runs.
	failed := &resizeState{allocated: resourcesOf(cpuPod("100m")), refused: resourcesOf(cpuPod("300m")), why: "below usage", since: t1, failed: true}
	out = mergeStatus(corev1.PodStatus{}, fromProvider, statusSpec{running: &grown, resize: failed, generation: 3})
	if c := findCondition(out.Conditions, corev1.PodResizeInProgress); c == nil || c.Reason != corev1.PodReasonError || c.Message != "below usage" ||
		findCondition(out.Conditions, corev1.PodResizePending) != nil || out.ContainerStatuses[0].Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("status %+v; want PodResizeInProgress Error, not pending, and 100m in effect", out)
	}
	out = mergeStatus(out, fromProvider, statusSpec{running: &spec})
	if findCondition(out.Conditions, corev1.PodResizeInProgress) != nil {
		t.Errorf("conditions %+v; want no PodResizeInProgress once the resize is made", out.Conditions)
	}
	own := fromProvider.DeepCopy()
	own.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonDeferred}}
	out = mergeStatus(corev1.PodStatus{}, own, statusSpec{running: &spec})
	if c := findCondition(out.Conditions, corev1.PodResizePending); c == nil || c.Reason != corev1.PodReasonDeferred {
		t.Errorf("conditions %+v; want the provider's PodResizePending", out.Conditions)
	}
}
