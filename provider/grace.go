package provider

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// GracePeriod is the time a pod is given to stop, as the kubelet reckons it: the
// grace period its deletion asked for, else its spec's terminationGracePeriodSeconds,
// else the API's default of 30 seconds. A negative value counts as zero.
//
// The controllers announce it and providers stop containers within it; one rule,
// so that what the node says and what the provider does cannot disagree.
func GracePeriod(pod *corev1.Pod) time.Duration {
	s := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		s = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		s = *pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(max(s, 0)) * time.Second
}
