package cri

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// containerIDPrefix is the scheme of the container IDs in the pod's status.
const containerIDPrefix = "containerd://"

// pendingStatus is the status of a pod just accepted.
func pendingStatus(pod *corev1.Pod, accepted time.Time) *corev1.PodStatus {
	rec := &podRecord{pod: pod, accepted: accepted, ctrs: map[string]*ctrState{}}
	return computeStatus(rec, pod, "")
}

// computeStatus is the pod's status from what the pod's goroutine last read from the
// runtime. It follows the kubelet: see the package doc for the states.
func computeStatus(rec *podRecord, pod *corev1.Pod, hostIP string) *corev1.PodStatus {
	s := &corev1.PodStatus{
		Phase:    corev1.PodPending,
		HostIP:   hostIP,
		QOSClass: pod.Status.QOSClass,
	}
	if hostIP != "" {
		s.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	s.StartTime = ptr.To(metav1.NewTime(rec.accepted.Truncate(time.Second)))
	podIP := rec.podIP
	if rec.sandboxSeen && (pod.Spec.HostNetwork || podIP == "") {
		podIP = hostIP
	}
	if rec.sandboxSeen && podIP != "" {
		s.PodIP = podIP
		s.PodIPs = []corev1.PodIP{{IP: podIP}}
	}
	initDone := len(pod.Spec.InitContainers) == 0 || rec.initDone
	initFailed := false
	// unready are the containers the pod's readiness waits for: its sidecars
	// (in spec order, first) and its app containers, as the kubelet lists them.
	var unready []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := containerStatus(rec, pod, c, initDone)
		if t := cs.State.Terminated; t != nil && t.ExitCode == 0 && !isSidecar(c) {
			// An init container that completed is ready, as the kubelet reports it.
			cs.Ready = true
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && !isSidecar(c) && !shouldRestart(c, pod, t.ExitCode) {
			initFailed = true
		}
		if isSidecar(c) && !cs.Ready {
			unready = append(unready, c.Name)
		}
	}
	s.EphemeralContainerStatuses = ephemeralStatuses(rec, pod)
	// stoppedFinal: stopped containers that will not start again (shouldRestart).
	var running, waiting, stopped, stoppedFinal, succeeded, failed int
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := containerStatus(rec, pod, c, initDone)
		if !initDone && cs.State.Waiting != nil {
			cs.State.Waiting.Reason = "PodInitializing"
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			} else {
				failed++
			}
			if !shouldRestart(c, pod, cs.State.Terminated.ExitCode) {
				stoppedFinal++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++
			if !shouldRestart(c, pod, cs.LastTerminationState.Terminated.ExitCode) && !startsAgain(rec.ctrs[c.Name]) {
				stoppedFinal++
			}
		default:
			waiting++
		}
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
	}

	switch {
	case rec.killed:
		// A deleted pod ends in a terminal phase, as with the kubelet.
		s.Phase = corev1.PodSucceeded
		if failed > 0 || waiting > 0 || stopped > succeeded || running > 0 {
			s.Phase = corev1.PodFailed
		}
	case initFailed:
		s.Phase = corev1.PodFailed
	case !initDone || !rec.sandboxReady && !rec.terminal:
		s.Phase = corev1.PodPending
	case waiting > 0:
		s.Phase = corev1.PodPending
	case running > 0:
		s.Phase = corev1.PodRunning
	case stopped > 0:
		// The pod has ended once none of its containers will start again (the
		// pod's restartPolicy, or each container's own and its rules).
		s.Phase = corev1.PodRunning
		if stoppedFinal == stopped {
			s.Phase = corev1.PodSucceeded
			if stopped != succeeded {
				s.Phase = corev1.PodFailed
			}
		}
	}
	if rec.deadlineExceeded {
		s.Phase = corev1.PodFailed
		s.Reason, s.Message = "DeadlineExceeded", "The pod ran for longer than its activeDeadlineSeconds allow"
	}
	if rec.terminal && !isTerminal(s.Phase) {
		s.Phase = rec.status.Phase
	}
	if rec.sandboxErr != "" && !rec.sandboxReady {
		s.Reason, s.Message = "", "creating sandbox: "+rec.sandboxErr
	}

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: now}
		if ok {
			c.Status = corev1.ConditionTrue
		} else {
			c.Reason, c.Message = reason, msg
		}
		return c
	}
	ready := len(unready) == 0 && s.Phase == corev1.PodRunning
	readyReason, readyMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if isTerminal(s.Phase) {
		ready, readyReason, readyMsg = false, "PodCompleted", ""
	}
	var pendingInit []string
	for _, cs := range s.InitContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			pendingInit = append(pendingInit, cs.Name)
		}
	}
	initReason, initMsg := "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(pendingInit, " "))
	if isTerminal(s.Phase) && initDone {
		initReason, initMsg = "PodCompleted", ""
	}
	s.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, rec.sandboxReady, "", ""),
		cond(corev1.PodInitialized, initDone, initReason, initMsg),
		cond(corev1.ContainersReady, ready, readyReason, readyMsg),
		cond(corev1.PodReady, ready, readyReason, readyMsg),
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: pod.CreationTimestamp},
	}
	if mayRestartAll(pod) {
		c := allContainersRestarting(rec, s.Phase)
		c.LastTransitionTime = now
		s.Conditions = append(s.Conditions, c)
	}
	return s
}

// containerStatus is the status of container c of the pod.
func containerStatus(rec *podRecord, pod *corev1.Pod, c *corev1.Container, initDone bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false)}
	st := rec.ctrs[c.Name]
	if st == nil || st.cur == nil {
		reason := "ContainerCreating"
		if st != nil && st.waitReason != "" {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: st.waitReason, Message: st.waitMessage}
			return cs
		}
		if !initDone {
			reason = "PodInitializing"
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		return cs
	}
	cur := st.cur
	cs.ContainerID = containerIDPrefix + cur.Id
	cs.ImageID = cur.ImageRef
	cs.RestartCount = int32(cur.GetMetadata().GetAttempt())
	if st.prev != nil {
		cs.LastTerminationState = terminatedState(st.prev)
	}
	switch cur.State {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(0, cur.StartedAt))}
		cs.Started = ptr.To(st.probes.started)
		cs.Ready = st.probes.ready
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		reason, message := st.waitReason, st.waitMessage
		if reason == "" && startsAgain(st) {
			reason = "ContainerCreating" // its next instance, at once
		}
		if reason != "" && rec.sandboxReady && !rec.terminal {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: message}
			cs.LastTerminationState = terminatedState(cur)
		} else {
			cs.State = terminatedState(cur)
		}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	return cs
}

func terminatedState(c *runtimeapi.ContainerStatus) corev1.ContainerState {
	if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return corev1.ContainerState{}
	}
	reason := c.Reason
	if reason == "" {
		reason = "Error"
		if c.ExitCode == 0 {
			reason = "Completed"
		}
	}
	t := &corev1.ContainerStateTerminated{
		ExitCode:    c.ExitCode,
		Reason:      reason,
		Message:     c.Message,
		FinishedAt:  metav1.NewTime(time.Unix(0, c.FinishedAt)),
		ContainerID: containerIDPrefix + c.Id,
	}
	if c.StartedAt > 0 {
		t.StartedAt = metav1.NewTime(time.Unix(0, c.StartedAt))
	}
	return corev1.ContainerState{Terminated: t}
}

// keepTransitionTimes gives the conditions of next whose status did not change the
// transition time they had in prev.
func keepTransitionTimes(prev, next *corev1.PodStatus) {
	if prev == nil {
		return
	}
	for i := range next.Conditions {
		for _, old := range prev.Conditions {
			if old.Type == next.Conditions[i].Type && old.Status == next.Conditions[i].Status {
				next.Conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
}

// publish stores the pod's new status and, if it changed, hands the pod to the
// NotifyPods callback (outside the lock).
func (p *Provider) publish(rec *podRecord, status *corev1.PodStatus) {
	p.mu.Lock()
	keepTransitionTimes(rec.status, status)
	changed := !equality.Semantic.DeepEqual(rec.status, status)
	rec.status = status
	notify := p.notify
	var pod *corev1.Pod
	if changed && notify != nil {
		pod = rec.podLocked()
	}
	p.mu.Unlock()
	if changed {
		// What the pod controller was told, and when: with its own log, it tells
		// a status the provider never reached from one the API never got.
		p.log.Debug("pod status changed", "pod", rec.key, "phase", status.Phase, "ready", podReady(status), "notified", notify != nil)
	}
	if pod != nil {
		notify(pod)
	}
}

// podReady is the status of the pod's Ready condition.
func podReady(s *corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
