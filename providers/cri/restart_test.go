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

func restartAllRule(codes ...int32) []corev1.ContainerRestartRule {
	return []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: codes},
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
		{"a rule RestartAllContainers that matches", corev1.RestartPolicyNever, &never, restartAllRule(42), 42, true, corev1.PodRunning},
		{"a rule RestartAllContainers that does not", corev1.RestartPolicyNever, &never, restartAllRule(42), 1, false, corev1.PodFailed},
		{"the first rule that matches decides", corev1.RestartPolicyNever, &always, append(restartRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 7), restartRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 8)...), 8, true, corev1.PodRunning},
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

// The container whose instance of this round exited with a code a rule
// RestartAllContainers matches triggers it; one of a round before, or one
// exiting otherwise, does not.
func TestRestartAllTrigger(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers:     []corev1.Container{{Name: "source", RestartPolicy: &never, RestartPolicyRules: restartAllRule(42)}, {Name: "other"}},
	}}
	exited := func(code int32) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: code, Metadata: &runtimeapi.ContainerMetadata{}}
	}
	cases := []struct {
		name   string
		source *ctrState
		want   string
	}{
		{"exited 42", &ctrState{cur: exited(42)}, "source"},
		{"exited 1", &ctrState{cur: exited(1)}, ""},
		{"exited 42 a round before", &ctrState{cur: exited(42), reset: true}, ""},
		{"exited 42 in an earlier sandbox", &ctrState{cur: exited(42), stale: true}, ""},
		{"running", &ctrState{cur: &runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, ""},
	}
	for _, c := range cases {
		rec := &podRecord{ctrs: map[string]*ctrState{"source": c.source, "other": {cur: exited(42)}}}
		if got := restartAllTrigger(rec, pod); got != c.want {
			t.Errorf("%s: trigger %q, want %q", c.name, got, c.want)
		}
	}
	if !mayRestartAll(pod) || mayRestartAll(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}) {
		t.Error("mayRestartAll does not tell a pod with a RestartAllContainers rule from one without")
	}
}

// A container reset by a RestartAllContainers shows Waiting with the instance
// killed as its last state, and the pod's condition AllContainersRestarting
// says True only while the containers are being killed.
func TestAResetContainersStatus(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "source", RestartPolicy: &never, RestartPolicyRules: restartAllRule(42)}},
	}}
	killed := &runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 137, Metadata: &runtimeapi.ContainerMetadata{Attempt: 2}}
	rec := &podRecord{ctrs: map[string]*ctrState{"source": {cur: killed, reset: true}}, sandboxReady: true, initDone: true, status: &corev1.PodStatus{}}
	condition := func(s *corev1.PodStatus) *corev1.PodCondition {
		for i := range s.Conditions {
			if s.Conditions[i].Type == corev1.AllContainersRestarting {
				return &s.Conditions[i]
			}
		}
		return nil
	}
	s := computeStatus(rec, pod, "10.0.0.1")
	cs := s.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 137 || cs.RestartCount != 2 {
		t.Errorf("reset container: state %+v, last state %+v, restarts %d; want Waiting, the killed instance last, 2", cs.State, cs.LastTerminationState, cs.RestartCount)
	}
	if c := condition(s); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("AllContainersRestarting after the kill: %+v, want False", c)
	}
	rec.restartingAll = true
	if c := condition(computeStatus(rec, pod, "10.0.0.1")); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "RestartAllContainersStarted" {
		t.Errorf("AllContainersRestarting while killing: %+v, want True, RestartAllContainersStarted", c)
	}
	if c := condition(computeStatus(rec, &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "source"}}}}, "10.0.0.1")); c != nil {
		t.Errorf("a pod without a RestartAllContainers rule has the condition %+v", c)
	}
}
