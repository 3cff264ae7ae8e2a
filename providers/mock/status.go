package mock

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The pod status is a pure function of a pod record and the time, so that what the
// mock reports at any instant can be tested without timers. See the package doc for
// the statuses in words.

// podStatusAt returns the status at now, which must be before it stopped, of the
// pod of r (pod is r's pod, decoded).
func podStatusAt(r *podRecord, pod *corev1.Pod, now time.Time) corev1.PodStatus {
	if !r.runningAt(now) {
		return pendingStatus(r, pod)
	}
	return runningStatus(r, pod)
}

// baseStatus holds what every status of the pod shares.
func baseStatus(r *podRecord, pod *corev1.Pod) corev1.PodStatus {
	return corev1.PodStatus{
		HostIP:    r.hostIP,
		HostIPs:   []corev1.HostIP{{IP: r.hostIP}},
		StartTime: ptr.To(metav1.NewTime(r.created.Time())),
		QOSClass:  pod.Status.QOSClass, // set by the API server; the mock keeps it
	}
}

func pendingStatus(r *podRecord, pod *corev1.Pod) corev1.PodStatus {
	s := baseStatus(r, pod)
	s.Phase = corev1.PodPending
	created := metav1.NewTime(r.created.Time())
	initialized := condition(corev1.PodInitialized, created, "")
	waiting := "ContainerCreating"
	if hasRegularInitContainers(pod) {
		initialized = condition(corev1.PodInitialized, created, "ContainersNotInitialized")
		waiting = "PodInitializing"
	}
	s.Conditions = []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, created, "PodSandboxNotReady"),
		initialized,
		condition(corev1.PodReady, created, "ContainersNotReady"),
		condition(corev1.ContainersReady, created, "ContainersNotReady"),
		condition(corev1.PodScheduled, created, ""),
	}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainerStatuses = append(s.InitContainerStatuses, waitingStatus(c, "PodInitializing"))
	}
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, waitingStatus(c, waiting))
	}
	return s
}

func runningStatus(r *podRecord, pod *corev1.Pod) corev1.PodStatus {
	s := baseStatus(r, pod)
	s.Phase = corev1.PodRunning
	s.PodIP = r.podIPText()
	s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	created, running := metav1.NewTime(r.created.Time()), metav1.NewTime(r.running.Time())
	s.Conditions = []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, running, ""),
		condition(corev1.PodInitialized, running, ""),
		condition(corev1.PodReady, running, ""),
		condition(corev1.ContainersReady, running, ""),
		condition(corev1.PodScheduled, created, ""),
	}
	for _, c := range pod.Spec.InitContainers {
		cs := containerStatus(r, c)
		if isSidecar(c) {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: running}
			cs.Ready, cs.Started = true, ptr.To(true)
		} else {
			// A regular init container ran to completion before the others started.
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: created, FinishedAt: running,
				ContainerID: cs.ContainerID,
			}
			cs.Started = ptr.To(false)
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
	}
	for _, c := range pod.Spec.Containers {
		cs := containerStatus(r, c)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: running}
		cs.Ready, cs.Started = true, ptr.To(true)
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	return s
}

// terminatedStatus is the pod's last status, reported when it stops: every container
// terminated with exit code 0, the phase left as it was.
func terminatedStatus(r *podRecord, pod *corev1.Pod) corev1.PodStatus {
	// The containers ran if they started before the stop, or by the time of the
	// deletion (with neither StartDelay nor StopDelay, all three are the same instant).
	s := pendingStatus(r, pod)
	if r.running < r.stopped || r.running <= r.deleted {
		s = runningStatus(r, pod)
	}
	stopped := metav1.NewTime(r.stopped.Time())
	for i := range s.Conditions {
		switch s.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady:
			s.Conditions[i] = condition(s.Conditions[i].Type, stopped, "PodCompleted")
		}
	}
	terminate := func(cs *corev1.ContainerStatus) {
		if cs.State.Terminated != nil {
			return // a completed init container
		}
		t := &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", FinishedAt: stopped, ContainerID: cs.ContainerID,
		}
		if cs.State.Running != nil {
			t.StartedAt = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: t}
		cs.Ready, cs.Started = false, ptr.To(false)
	}
	for i := range s.InitContainerStatuses {
		terminate(&s.InitContainerStatuses[i])
	}
	for i := range s.ContainerStatuses {
		terminate(&s.ContainerStatuses[i])
	}
	return s
}

// terminatedPod returns a copy of the pod with its last status.
func (r *podRecord) terminatedPod() *corev1.Pod {
	pod := r.pod()
	pod.Status = terminatedStatus(r, pod)
	return pod
}

// condition returns a condition that is True when reason is empty, False otherwise.
func condition(t corev1.PodConditionType, at metav1.Time, reason string) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: at}
	if reason != "" {
		c.Status, c.Reason = corev1.ConditionFalse, reason
	}
	return c
}

func waitingStatus(c corev1.Container, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:    c.Name,
		Image:   c.Image,
		State:   corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
		Started: ptr.To(false),
	}
}

// containerStatus returns the identity part of a started container's status.
func containerStatus(r *podRecord, c corev1.Container) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     "mock://" + c.Image,
		ContainerID: "mock://" + string(r.uid) + "/" + c.Name,
	}
}

// isSidecar reports whether an init container is a sidecar, which keeps running.
func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func hasRegularInitContainers(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.InitContainers {
		if !isSidecar(c) {
			return true
		}
	}
	return false
}
