package pod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

const lbGate corev1.PodConditionType = "example.com/load-balancer"

func readyFromProvider(s corev1.ConditionStatus) *corev1.PodStatus {
	return &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: s, LastTransitionTime: t0},
		{Type: corev1.PodReady, Status: s, LastTransitionTime: t0},
	}}
}

func condition(s corev1.PodStatus, t corev1.PodConditionType) corev1.PodCondition {
	if c := findCondition(s.Conditions, t); c != nil {
		return *c
	}
	return corev1.PodCondition{}
}

func TestReadinessGatesHoldReadyBackUntilTheyAreTrue(t *testing.T) {
	gates := []corev1.PodReadinessGate{{ConditionType: lbGate}}
	cases := []struct {
		name       string
		api        []corev1.PodCondition // what others wrote
		provider   corev1.ConditionStatus
		want       corev1.ConditionStatus
		wantReason string
		inMessage  string
	}{
		{name: "no condition for the gate yet", provider: corev1.ConditionTrue,
			want: corev1.ConditionFalse, wantReason: reasonReadinessGatesNotReady, inMessage: `"example.com/load-balancer" has no condition`},
		{name: "gate False", api: []corev1.PodCondition{{Type: lbGate, Status: corev1.ConditionFalse}}, provider: corev1.ConditionTrue,
			want: corev1.ConditionFalse, wantReason: reasonReadinessGatesNotReady, inMessage: `"example.com/load-balancer" is False`},
		{name: "gate True", api: []corev1.PodCondition{{Type: lbGate, Status: corev1.ConditionTrue}}, provider: corev1.ConditionTrue,
			want: corev1.ConditionTrue},
		{name: "containers not ready: the provider's reason stands", api: []corev1.PodCondition{{Type: lbGate, Status: corev1.ConditionTrue}},
			provider: corev1.ConditionFalse, want: corev1.ConditionFalse},
		{name: "a repeated gate is judged by its first condition",
			api:      []corev1.PodCondition{{Type: lbGate, Status: corev1.ConditionTrue}, {Type: lbGate, Status: corev1.ConditionFalse}},
			provider: corev1.ConditionTrue, want: corev1.ConditionTrue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeStatus(corev1.PodStatus{Conditions: tc.api}, readyFromProvider(tc.provider), statusSpec{gates: gates})
			ready := condition(got, corev1.PodReady)
			if ready.Status != tc.want || ready.Reason != tc.wantReason || !strings.Contains(ready.Message, tc.inMessage) {
				t.Errorf("Ready %s (%q: %q), want %s (%q, message with %q)", ready.Status, ready.Reason, ready.Message, tc.want, tc.wantReason, tc.inMessage)
			}
			if cr := condition(got, corev1.ContainersReady); cr.Status != tc.provider {
				t.Errorf("ContainersReady %s, want the provider's %s", cr.Status, tc.provider)
			}
			if n := len(got.Conditions); n != len(tc.api)+2 {
				t.Errorf("%d conditions, want the %d others wrote and the provider's two: %+v", n, len(tc.api), got.Conditions)
			}
		})
	}
}

func TestEveryGateMustBeTrue(t *testing.T) {
	gates := []corev1.PodReadinessGate{{ConditionType: lbGate}, {ConditionType: "example.com/mesh"}}
	api := []corev1.PodCondition{{Type: lbGate, Status: corev1.ConditionTrue}, {Type: "example.com/mesh", Status: corev1.ConditionUnknown}}
	ready := condition(mergeStatus(corev1.PodStatus{Conditions: api}, readyFromProvider(corev1.ConditionTrue), statusSpec{gates: gates}), corev1.PodReady)
	if ready.Status != corev1.ConditionFalse || !strings.Contains(ready.Message, `"example.com/mesh" is Unknown`) || strings.Contains(ready.Message, string(lbGate)) {
		t.Errorf("Ready %s: %q; want False, naming the mesh gate only", ready.Status, ready.Message)
	}
	api[1].Status = corev1.ConditionTrue
	if ready := condition(mergeStatus(corev1.PodStatus{Conditions: api}, readyFromProvider(corev1.ConditionTrue), statusSpec{gates: gates}), corev1.PodReady); ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready %s: %q with every gate True", ready.Status, ready.Message)
	}
}

// The gate's transition keeps its time while Ready's status does not change:
// a second check of a gated pod writes nothing.
func TestAGatedPodsStatusIsStable(t *testing.T) {
	gates := []corev1.PodReadinessGate{{ConditionType: lbGate}}
	first := mergeStatus(corev1.PodStatus{}, readyFromProvider(corev1.ConditionTrue), statusSpec{gates: gates})
	again := mergeStatus(first, readyFromProvider(corev1.ConditionTrue), statusSpec{gates: gates})
	if patch, err := statuspatch.Build("uid", &first, &again); err != nil || patch != nil {
		t.Errorf("second check patches %s (%v); want nothing", patch, err)
	}
}
