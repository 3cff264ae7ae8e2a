package pod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

// desiredStatus is the status p should have once fromProvider, what the provider
// (or the node on its behalf) reports, is merged into the API's (mergeStatus),
// with a finished pod not Ready (finishedNotReady, as of now). resize is the
// node's record of the pod resized in place and running the spec whose
// resources the provider runs (nil: as the API has them), both for resizeStatus.
// server is what the API server keeps (nil: everything).
func desiredStatus(p *corev1.Pod, fromProvider *corev1.PodStatus, resize *resizeState, running *corev1.PodSpec, server *apifeatures.Set, now metav1.Time) corev1.PodStatus {
	of := specOf(p)
	of.resize, of.running = resize, running
	of.noGeneration = !server.Has(apifeatures.PodObservedGeneration)
	of.noPodLevelStatus = !server.Has(apifeatures.PodLevelResourcesStatus)
	desired := mergeStatus(p.Status, fromProvider, of)
	finishedNotReady(&p.Status, &desired, now)
	return desired
}

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
// word. With no generation known the API's observedGeneration stays. On a
// server that keeps none (of.noGeneration) none is written.
func mergeStatus(current corev1.PodStatus, fromProvider *corev1.PodStatus, of statusSpec) corev1.PodStatus {
	out := *current.DeepCopy()
	if of.generation > 0 && !of.noGeneration {
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
	// noGeneration and noPodLevelStatus say the API server keeps no
	// observedGeneration (apifeatures.PodObservedGeneration) or no pod-level
	// resources in the status (apifeatures.PodLevelResourcesStatus): the node
	// writes none, as that release's kubelet. A field the server drops would
	// be missing from every status the node compares with, and written again
	// at every check.
	noGeneration, noPodLevelStatus bool
}

// specOf is the statusSpec of p.
func specOf(p *corev1.Pod) statusSpec {
	return statusSpec{gates: p.Spec.ReadinessGates, generation: p.Generation}
}

// observed is condition c, from the provider, observing the generation the
// status is written for unless it says which it observed.
func (s statusSpec) observed(c corev1.PodCondition) corev1.PodCondition {
	if s.noGeneration {
		c.ObservedGeneration = 0
		return c
	}
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

// findCondition is the first condition of type t in conds, or nil.
func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func findContainerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// isTerminal reports whether the pod has finished for good.
func isTerminal(s *corev1.PodStatus) bool {
	return s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed
}
