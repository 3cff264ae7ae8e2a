package pod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// Reasons of the conditions the node fills in, the kubelet's.
const (
	reasonContainersNotReady       = "ContainersNotReady"
	reasonContainersNotInitialized = "ContainersNotInitialized"
	reasonPodCompleted             = "PodCompleted"
)

// derivedConditions are the conditions the kubelet works out from a pod's
// container statuses; a provider that leaves one out gets it filled in
// (withDerivedConditions), so that `kubectl wait --for=condition=Ready`,
// Services and rollouts work with a provider that only reports its containers.
var derivedConditions = []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}

// lacksDerivedConditions reports whether s leaves out one of derivedConditions.
func lacksDerivedConditions(s *corev1.PodStatus) bool {
	for _, t := range derivedConditions {
		if findCondition(s.Conditions, t) == nil {
			return true
		}
	}
	return false
}

// completed is the provider's status s with what the kubelet always writes and
// s left out: the derived conditions and, while the API has none either, a start
// time. The kubelet's start time is when it took the pod on; for a provider that
// does not say, it is when the node first hears of the pod from it, and active
// deadlines count from it. s is not changed; it is returned as it is when it
// lacks nothing, which is the common case.
func (c *Controller) completed(cached *podwire.Pod, api, s *corev1.PodStatus) (*corev1.PodStatus, error) {
	now := metav1.NewTime(c.clock.Now())
	copied := false
	if lacksDerivedConditions(s) {
		of, err := containersOf(cached)
		if err != nil {
			return nil, err
		}
		s, copied = withDerivedConditions(s, of, now), true
	}
	if s.StartTime == nil && api.StartTime == nil {
		if !copied {
			s = s.DeepCopy()
		}
		s.StartTime = &now
	}
	return s, nil
}

// podContainers are the names of a pod's containers, as a status judges them.
type podContainers struct {
	app, init []string
	sidecars  map[string]bool // init containers that keep running (restartPolicy Always)
}

// withDerivedConditions returns s with each of derivedConditions it lacks
// worked out from its container statuses as the kubelet works them out:
// Initialized once every init container has succeeded (a sidecar once it has
// started), ContainersReady and Ready once every app container and sidecar is
// ready, neither once the pod has finished. s itself is not changed.
func withDerivedConditions(s *corev1.PodStatus, of podContainers, now metav1.Time) *corev1.PodStatus {
	out := s.DeepCopy()
	if findCondition(out.Conditions, corev1.PodInitialized) == nil {
		out.Conditions = append(out.Conditions, initializedCondition(out, of, now))
	}
	ready := readyCondition(out, of, now)
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		if findCondition(out.Conditions, t) == nil {
			c := ready
			c.Type = t
			out.Conditions = append(out.Conditions, c)
		}
	}
	return out
}

func initializedCondition(s *corev1.PodStatus, of podContainers, now metav1.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now}
	if s.Phase == corev1.PodRunning || s.Phase == corev1.PodSucceeded {
		return c // the app containers ran: initialisation is over
	}
	var incomplete []string
	for _, name := range of.init {
		cs := findContainerStatus(s.InitContainerStatuses, name)
		done := cs != nil && (of.sidecars[name] && (cs.State.Running != nil && ptr.Deref(cs.Started, false)) ||
			cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0)
		if !done {
			incomplete = append(incomplete, name)
		}
	}
	if len(incomplete) > 0 {
		c.Status, c.Reason = corev1.ConditionFalse, reasonContainersNotInitialized
		c.Message = "init containers not done: " + strings.Join(incomplete, ", ")
	}
	return c
}

// readyCondition is ContainersReady as worked out from s (Ready is the same
// before its readiness gates, which mergeStatus applies).
func readyCondition(s *corev1.PodStatus, of podContainers, now metav1.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}
	if isTerminal(s) {
		c.Status, c.Reason = corev1.ConditionFalse, reasonPodCompleted
		return c
	}
	var unready []string
	for _, name := range of.init {
		if cs := findContainerStatus(s.InitContainerStatuses, name); of.sidecars[name] && (cs == nil || !cs.Ready) {
			unready = append(unready, name)
		}
	}
	for _, name := range of.app {
		if cs := findContainerStatus(s.ContainerStatuses, name); cs == nil || !cs.Ready {
			unready = append(unready, name)
		}
	}
	if len(unready) > 0 || len(of.app) == 0 {
		c.Status, c.Reason = corev1.ConditionFalse, reasonContainersNotReady
		c.Message = "containers not ready: " + strings.Join(unready, ", ")
	}
	return c
}

// containersOf reads the names of the cached pod's containers from its encoding.
func containersOf(c *podwire.Pod) (podContainers, error) {
	of, err := c.Containers()
	return podContainers{app: of.App, init: of.Init, sidecars: of.Sidecars}, err
}
