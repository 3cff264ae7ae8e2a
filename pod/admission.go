package pod

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of the kubelet's admission refusals the node makes too: a pod whose
// operating system is not the node's never reaches the provider.
const (
	ReasonPodOSNotSupported                  = "PodOSNotSupported"
	ReasonPodOSSelectorNodeLabelDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
)

// admitOS is why the kubelet would refuse pod p on a node whose operating system
// (its kubernetes.io/os label) is os: a kubernetes.io/os label of the pod that
// names another, or a spec.os.name that is not os. ok when p may run.
func admitOS(p *corev1.Pod, os string) (reason, message string, ok bool) {
	if l, has := p.Labels[corev1.LabelOSStable]; has && l != os {
		return ReasonPodOSSelectorNodeLabelDoesNotMatch, "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label", false
	}
	if p.Spec.OS != nil && string(p.Spec.OS.Name) != os {
		return ReasonPodOSNotSupported, "Failed to admit pod as the OS field doesn't match node OS", false
	}
	return "", "", true
}

// reject ends pod p, which the node does not admit, before it reaches the
// provider, as the kubelet rejects a pod: a Warning Event with the reason, and
// the pod Failed with the reason and the message.
func (c *Controller) reject(ctx context.Context, p *corev1.Pod, reason, message string) error {
	c.recorder.Event(p, corev1.EventTypeWarning, reason, message)
	c.log.Info("pod rejected", "pod", keyOf(p), "reason", reason)
	now := metav1.NewTime(c.clock.Now())
	return c.writeStatus(ctx, p, &corev1.PodStatus{
		Phase: corev1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message, StartTime: &now,
	}, nil)
}
