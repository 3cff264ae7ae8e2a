package pod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mergeStatus returns the status the API pod should have once the provider's view
// is applied to it. The provider owns the phase, reason and message, addresses, start
// time and container statuses; conditions are merged by type, so conditions written
// by others (readiness gates, DisruptionTarget, …) stay, and a condition whose status
// did not change keeps its transition time. Restart counts never go back and a
// pod's start time, once set, stays (see withRestartHistory). Everything else (qosClass, resize
// status, …) is kept from the API pod. The provider's Ready condition is held back
// while one of the pod's readiness gates is not True (gatedReady).
//
// The status, and each condition the provider reports, observe the generation
// of the pod the node works from (observedGeneration, as the kubelet sets it);
// a provider that says which generation a condition observed is taken at its
// word. With no generation known the API's observedGeneration stays.
func mergeStatus(current corev1.PodStatus, fromProvider *corev1.PodStatus, of statusSpec) corev1.PodStatus {
	out := *current.DeepCopy()
	if of.generation > 0 {
		out.ObservedGeneration = of.generation
	}
	p := fromProvider
	if p.Phase != "" {
		out.Phase = p.Phase
	}
	out.Reason, out.Message = p.Reason, p.Message
	if isTerminal(&current) {
		// The API refuses to take a pod out of a terminal phase, and what ended
		// it (DeadlineExceeded, ProviderLost) stays what the pod says; only its
		// containers' states still come from the provider as they stop.
		out.Phase, out.Reason, out.Message = current.Phase, current.Reason, current.Message
	}
	if p.HostIP != "" {
		out.HostIP, out.HostIPs = p.HostIP, p.HostIPs
	}
	if p.PodIP != "" {
		out.PodIP, out.PodIPs = p.PodIP, p.PodIPs
	}
	// The pod's start time is when a node first took the pod on, set once: a
	// provider that lost the pod and started it again reports a later one.
	if p.StartTime != nil && out.StartTime == nil {
		out.StartTime = p.StartTime.DeepCopy()
	}
	if p.ContainerStatuses != nil {
		out.ContainerStatuses = withRestartHistory(current.ContainerStatuses, p.ContainerStatuses)
	}
	if p.InitContainerStatuses != nil {
		out.InitContainerStatuses = withRestartHistory(current.InitContainerStatuses, p.InitContainerStatuses)
	}
	if p.EphemeralContainerStatuses != nil {
		out.EphemeralContainerStatuses = p.EphemeralContainerStatuses
	}
	// Room for the provider's conditions at once, not a copy per append.
	out.Conditions = slices.Grow(out.Conditions, len(p.Conditions))
	var ready *corev1.PodCondition
	for i, c := range p.Conditions {
		if c.Type == corev1.PodReady && len(of.gates) > 0 {
			ready = &p.Conditions[i] // judged once every other condition is in
			continue
		}
		out.Conditions = upsertCondition(out.Conditions, of.observed(c))
	}
	if ready != nil {
		out.Conditions = upsertCondition(out.Conditions, of.observed(gatedReady(*ready, of.gates, out.Conditions)))
	}
	resizeStatus(&current, &out, fromProvider, of)
	return out
}

// statusSpec is what of a pod's spec and metadata a status merge judges by.
type statusSpec struct {
	gates      []corev1.PodReadinessGate // spec.readinessGates
	generation int64                     // metadata.generation of the pod the node works from; 0 if unknown
	resize     *resizeState              // the node's record of the pod resized in place; nil if never
	// running is the spec whose containers' resources the provider runs, for a
	// provider that resizes in place (nil for others): the statuses report them.
	running *corev1.PodSpec
}

// specOf is the statusSpec of p.
func specOf(p *corev1.Pod) statusSpec {
	return statusSpec{gates: p.Spec.ReadinessGates, generation: p.Generation}
}

// observed is condition c, from the provider, observing the generation the
// status is written for unless it says which it observed.
func (s statusSpec) observed(c corev1.PodCondition) corev1.PodCondition {
	if c.ObservedGeneration == 0 {
		c.ObservedGeneration = s.generation
	}
	return c
}

// finishedNotReady makes a pod that has finished (desired's phase) not Ready nor
// ContainersReady, with the kubelet's reason PodCompleted, whatever its provider
// last said: a pod the node stopped at its deadline may report its containers
// ready until they have stopped. The transition time is now, or current's if it
// already said so.
func finishedNotReady(current, desired *corev1.PodStatus, now metav1.Time) {
	if !isTerminal(desired) {
		return
	}
	for i := range desired.Conditions {
		c := &desired.Conditions[i]
		if (c.Type != corev1.PodReady && c.Type != corev1.ContainersReady) || c.Status != corev1.ConditionTrue {
			continue
		}
		c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionFalse, reasonPodCompleted, "", now
		if was := findCondition(current.Conditions, c.Type); was != nil && was.Status == corev1.ConditionFalse && !was.LastTransitionTime.IsZero() {
			c.LastTransitionTime = was.LastTransitionTime
		}
	}
}

func upsertCondition(conds []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		if conds[i].Status == c.Status && !conds[i].LastTransitionTime.IsZero() {
			c.LastTransitionTime = conds[i].LastTransitionTime
		}
		if equality.Semantic.DeepEqual(conds[i], c) {
			return conds
		}
		conds[i] = c
		return conds
	}
	return append(conds, c)
}

// isTerminal reports whether the pod has finished for good.
func isTerminal(s *corev1.PodStatus) bool {
	return s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed
}

// stopped reports whether the provider says nothing of the pod runs any more: the
// pod is terminal, or every app container has terminated and no init container runs.
// A waiting container may still start, so it does not count as stopped.
func stopped(s *corev1.PodStatus) bool {
	if isTerminal(s) {
		return true
	}
	if len(s.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range s.InitContainerStatuses {
		if cs.State.Running != nil {
			return false
		}
	}
	for _, cs := range s.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// hasStarted reports whether the API has seen the pod run.
func hasStarted(s *corev1.PodStatus) bool {
	if s.Phase == corev1.PodRunning {
		return true
	}
	for _, cs := range s.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
			return true
		}
	}
	return false
}

// Reason and exit code of the last state of a container that a provider lost and
// started again: the kubelet's for a container it can no longer find.
const (
	reasonContainerStatusUnknown = "ContainerStatusUnknown"
	exitCodeContainerUnknown     = 137
)

// withRestartHistory returns the provider's container statuses with the history
// the API already records kept, as the kubelet keeps it across restarts: a
// container's restart count never goes back, and a container the provider started
// anew without counting it (it lost the pod, for instance in a crash of an
// in-process back end, and was asked to create it again) counts one restart more,
// with the instance the API knew as its last state. A provider that counts its
// own restarts (its count is ahead of the API's) is taken as it is.
func withRestartHistory(api, fromProvider []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(api) == 0 {
		return fromProvider
	}
	var out []corev1.ContainerStatus
	for i := range fromProvider {
		pc := &fromProvider[i]
		ac := findContainerStatus(api, pc.Name)
		if ac == nil || pc.RestartCount > ac.RestartCount {
			continue
		}
		next := *pc
		next.RestartCount = ac.RestartCount
		if next.LastTerminationState == (corev1.ContainerState{}) {
			next.LastTerminationState = ac.LastTerminationState
		}
		// The API keeps times to the second: compare them so.
		if was, now := startedAt(ac.State), startedAt(pc.State); !was.IsZero() && !now.IsZero() && was.Unix() != now.Unix() {
			// A new instance the provider did not count.
			next.RestartCount++
			next.LastTerminationState = asTerminated(ac.State, now)
		}
		if equality.Semantic.DeepEqual(&next, pc) {
			continue
		}
		if out == nil {
			out = slices.Clone(fromProvider) // the provider's slice is not ours to change
		}
		out[i] = next
	}
	if out == nil {
		return fromProvider
	}
	return out
}

func findContainerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// startedAt is when the instance a state describes started; zero if none did.
func startedAt(s corev1.ContainerState) metav1.Time {
	switch {
	case s.Running != nil:
		return s.Running.StartedAt
	case s.Terminated != nil:
		return s.Terminated.StartedAt
	}
	return metav1.Time{}
}

// asTerminated is the last state of a container instance that was replaced at
// replacedAt: as it ended if the API saw it end, else ended for an unknown reason.
func asTerminated(s corev1.ContainerState, replacedAt metav1.Time) corev1.ContainerState {
	if s.Terminated != nil {
		return corev1.ContainerState{Terminated: s.Terminated.DeepCopy()}
	}
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: exitCodeContainerUnknown, Reason: reasonContainerStatusUnknown,
		Message:   "The provider no longer had the container; it was started again",
		StartedAt: startedAt(s), FinishedAt: replacedAt,
	}}
}
