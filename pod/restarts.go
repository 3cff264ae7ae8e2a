package pod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
