package pod

import (
	"github.com/vkubelet/vkubelet/provider"
	corev1 "k8s.io/api/core/v1"
)

// failedReasons are the waiting reasons of a container the kubelet could not
// create or start, for each of which it records a Warning Event "Failed" on
// the pod ("Error: " and the message): its configuration refused (a missing
// reference, runAsNonRoot against a root user), the runtime refusing to create
// or to start it.
var failedReasons = map[string]bool{
	ReasonCreateContainerConfigError: true,
	"CreateContainerError":           true,
	"RunContainerError":              true,
}

// recordContainerFailures records, as the kubelet would, a Warning Event
// "Failed" for each container that next, the provider's status of pod p, shows
// waiting for one of failedReasons, unless p's status in the API shows it so
// already with the same message: one Event per failure, not one per status
// check.
func (c *Controller) recordContainerFailures(p *corev1.Pod, next *corev1.PodStatus) {
	for _, pair := range [][2][]corev1.ContainerStatus{
		{p.Status.InitContainerStatuses, next.InitContainerStatuses},
		{p.Status.ContainerStatuses, next.ContainerStatuses},
		{p.Status.EphemeralContainerStatuses, next.EphemeralContainerStatuses},
	} {
		for _, cs := range pair[1] {
			w := cs.State.Waiting
			if w == nil || !failedReasons[w.Reason] {
				continue
			}
			if old := findContainerStatus(pair[0], cs.Name); old != nil && old.State.Waiting != nil &&
				old.State.Waiting.Reason == w.Reason && old.State.Waiting.Message == w.Message {
				continue
			}
			c.recorder.Event(p, corev1.EventTypeWarning, ReasonFailed, "Error: "+w.Message)
		}
	}
}

// recordProviderEvent records ev, an Event of the provider's own
// (provider.PodEventRecorder), on its pod, or on the container it names with
// the field path the kubelet gives a container's Events.
func (c *Controller) recordProviderEvent(ev provider.PodEvent) {
	if ev.Pod == nil || ev.Reason == "" {
		return
	}
	ref := &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1",
		Namespace: ev.Pod.Namespace, Name: ev.Pod.Name, UID: ev.Pod.UID,
	}
	if ev.Container != "" {
		ref.FieldPath = containerFieldPath(&ev.Pod.Spec, ev.Container)
	}
	eventType := ev.Type
	if eventType != corev1.EventTypeWarning {
		eventType = corev1.EventTypeNormal
	}
	c.recorder.Event(ref, eventType, ev.Reason, ev.Message)
}

// containerFieldPath is the field path of container name in spec, as Events
// name it: spec.initContainers{name}, spec.ephemeralContainers{name} or
// spec.containers{name}.
func containerFieldPath(spec *corev1.PodSpec, name string) string {
	for _, c := range spec.InitContainers {
		if c.Name == name {
			return "spec.initContainers{" + name + "}"
		}
	}
	for _, c := range spec.EphemeralContainers {
		if c.Name == name {
			return "spec.ephemeralContainers{" + name + "}"
		}
	}
	return "spec.containers{" + name + "}"
}
