package cri

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func restartRule(op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) []corev1.ContainerRestartRule {
	return []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes},
	}}
}

// A container restarts by its first matching rule, else its own restartPolicy,
// else the pod's; and the pod ends once none of its stopped containers will
// start again.
func TestContainerRestartPolicyAndRules(t *testing.T) {
	never, always, onFailure := corev1.ContainerRestartPolicyNever, corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyOnFailure
	cases := []struct {
		name    string
		pod     corev1.RestartPolicy
		policy  *corev1.ContainerRestartPolicy
		rules   []corev1.ContainerRestartRule
		exit    int32
		restart bool
		phase   corev1.PodPhase // once it exited
	}{
		{"the pod's Always", corev1.RestartPolicyAlways, nil, nil, 1, true, corev1.PodRunning},
		{"the pod's Never", corev1.RestartPolicyNever, nil, nil, 1, false, corev1.PodFailed},
		{"the pod's OnFailure, exit 0", corev1.RestartPolicyOnFailure, nil, nil, 0, false, corev1.PodSucceeded},
		{"Never over the pod's Always", corev1.RestartPolicyAlways, &never, nil, 1, false, corev1.PodFailed},
		{"Never over the pod's Always, exit 0", corev1.RestartPolicyAlways, &never, nil, 0, false, corev1.PodSucceeded},
		{"Always over the pod's Never", corev1.RestartPolicyNever, &always, nil, 0, true, corev1.PodRunning},
		{"OnFailure, exit 2", corev1.RestartPolicyNever, &onFailure, nil, 2, true, corev1.PodRunning},
		{"a rule In that matches", corev1.RestartPolicyNever, &never, restartRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, true, corev1.PodRunning},
		{"a rule In that does not", corev1.RestartPolicyNever, &never, restartRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 1, false, corev1.PodFailed},
		{"a rule NotIn that matches", corev1.RestartPolicyNever, &never, restartRule(corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0), 3, true, corev1.PodRunning},
		{"a rule NotIn that does not", corev1.RestartPolicyAlways, &never, restartRule(corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0), 0, false, corev1.PodSucceeded},
	}
	for _, c := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: c.pod, Containers: []corev1.Container{
			{Name: "main", RestartPolicy: c.policy, RestartPolicyRules: c.rules},
		}}}
		if got := shouldRestart(&pod.Spec.Containers[0], pod, c.exit); got != c.restart {
			t.Errorf("%s: restart %v, want %v", c.name, got, c.restart)
		}
		exited := &runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: c.exit, Metadata: &runtimeapi.ContainerMetadata{}}
		rec := &podRecord{ctrs: map[string]*ctrState{"main": {cur: exited}}, sandboxReady: true, initDone: true, status: &corev1.PodStatus{}}
		if got := computeStatus(rec, pod, "10.0.0.1").Phase; got != c.phase {
			t.Errorf("%s: phase %s, want %s", c.name, got, c.phase)
		}
	}
	// An init container that failed and will not restart fails the pod.
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways,
		InitContainers: []corev1.Container{{Name: "init", RestartPolicy: ptr.To(never)}}, Containers: []corev1.Container{{Name: "main"}}}}
	exited := &runtimeapi.ContainerStatus{Id: "i", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 1, Metadata: &runtimeapi.ContainerMetadata{}}
	rec := &podRecord{ctrs: map[string]*ctrState{"init": {cur: exited}}, sandboxReady: true, status: &corev1.PodStatus{}}
	if got := computeStatus(rec, pod, "10.0.0.1").Phase; got != corev1.PodFailed {
		t.Errorf("an init container with restartPolicy Never failed: phase %s, want Failed", got)
	}
}
