package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// instance is one run of a container, as the job script recorded it.
type instance struct {
	waitingReason, waitingMessage string
	started                       time.Time // zero: not started
	exited                        bool
	exitCode                      int32
	exitReason, exitMessage       string // set by the script when the container could not start
	finished                      time.Time
}

// readInstances reads the recorded instances of a container, oldest first.
func readInstances(dir, container string) []instance {
	base := filepath.Join(dir, containerDir, container)
	var out []instance
	for n := 0; ; n++ {
		i := filepath.Join(base, strconv.Itoa(n))
		if _, err := os.Stat(i); err != nil {
			return out
		}
		var in instance
		if b, err := os.ReadFile(filepath.Join(i, "waiting")); err == nil {
			reason, msg, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
			in.waitingReason, in.waitingMessage = reason, strings.TrimSpace(msg)
		}
		if b, err := os.ReadFile(filepath.Join(i, "started")); err == nil {
			in.started, _ = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
		}
		if b, err := os.ReadFile(filepath.Join(i, "exit")); err == nil {
			f := strings.Fields(string(b))
			in.exited = true
			if len(f) > 0 {
				c, _ := strconv.ParseInt(f[0], 10, 32)
				in.exitCode = int32(c)
			}
			if len(f) > 1 {
				in.finished, _ = time.Parse(time.RFC3339Nano, f[1])
			}
			if len(f) > 2 {
				in.exitReason = f[2]
			}
			if m, err := os.ReadFile(filepath.Join(i, "message")); err == nil {
				in.exitMessage = strings.TrimSpace(string(m))
			}
		}
		out = append(out, in)
	}
}

// jobView is what the provider knows of a pod's job when it computes a status.
type jobView struct {
	ID    string // "" until submitted
	Known bool   // squeue lists the job
	job
}

// Slurm's job states, as squeue writes them, grouped by what they mean for a pod.
var (
	pendingStates  = map[string]bool{"PENDING": true, "REQUEUED": true, "REQUEUE_FED": true, "REQUEUE_HOLD": true, "CONFIGURING": true, "RESV_DEL_HOLD": true}
	terminalStates = map[string]bool{"COMPLETED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true, "NODE_FAIL": true,
		"PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true, "OUT_OF_MEMORY": true, "SPECIAL_EXIT": true, "REVOKED": true}
)

// terminalReason is the pod's reason for a job Slurm ended (not for one that
// ended by itself).
func terminalReason(state string) string {
	switch state {
	case "TIMEOUT", "DEADLINE":
		return "DeadlineExceeded"
	case "NODE_FAIL", "BOOT_FAIL":
		return "NodeFailure"
	case "PREEMPTED":
		return "Preempted"
	case "OUT_OF_MEMORY":
		return "OOMKilled"
	case "CANCELLED":
		return "Cancelled"
	}
	return ""
}

// podStatus maps a pod's job and its containers' recorded instances to the pod's
// status, as the kubelet would report the same containers. started is when the
// provider accepted the pod.
func podStatus(pod *corev1.Pod, j jobView, instances map[string][]instance, started time.Time) *corev1.PodStatus {
	st := &corev1.PodStatus{Phase: corev1.PodPending, StartTime: &metav1.Time{Time: started}}
	pending := j.ID == "" || (j.Known && pendingStates[j.State])
	ended := !pending && (!j.Known || terminalStates[j.State])
	switch {
	case j.ID == "":
		st.Message = "submitting to Slurm"
	case !j.Known:
		st.Message = "Slurm job " + j.ID
	case pending:
		st.Message = fmt.Sprintf("Slurm job %s: %s (%s)", j.ID, strings.ToLower(j.State), j.Reason)
	default:
		st.Message = fmt.Sprintf("Slurm job %s on %s", j.ID, j.Node)
	}

	// kill is the reason given to containers that Slurm ended before they did.
	kill := ""
	if ended {
		if kill = terminalReason(j.State); kill == "" {
			kill = "ContainerStatusUnknown"
		}
		if !j.Known {
			kill = "JobLost"
		}
	}
	status := func(c corev1.Container, waitReason string) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ContainerID: "podman://" + containerName(pod, c.Name)}
		ins := instances[c.Name]
		if len(ins) == 0 {
			switch {
			case ended:
				cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: kill}
			case pending:
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: st.Message}
			default:
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waitReason}
			}
			return cs
		}
		cur := ins[len(ins)-1]
		cs.RestartCount = int32(len(ins) - 1)
		if len(ins) > 1 {
			if prev := ins[len(ins)-2]; prev.exited {
				cs.LastTerminationState.Terminated = terminated(prev)
			}
		}
		switch {
		case cur.exited:
			cs.State.Terminated = terminated(cur)
		case ended:
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: kill, StartedAt: metav1.Time{Time: cur.started}}
		case !cur.started.IsZero():
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: cur.started}}
			cs.Ready, cs.Started = true, ptr(true)
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: cur.waitingReason, Message: cur.waitingMessage}
			if cs.State.Waiting.Reason == "" {
				cs.State.Waiting.Reason = "ContainerCreating"
			}
		}
		if cs.Started == nil {
			cs.Started = ptr(false)
		}
		return cs
	}

	initialized := true
	for _, c := range pod.Spec.InitContainers {
		cs := status(c, "PodInitializing")
		if !initialized && cs.State.Waiting != nil {
			cs.State.Waiting.Reason = "PodInitializing"
		}
		done := cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		initialized = initialized && done
		cs.Ready = done
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	running, exited, failed := 0, 0, 0
	for _, c := range pod.Spec.Containers {
		reason := "ContainerCreating"
		if !initialized {
			reason = "PodInitializing"
		}
		cs := status(c, reason)
		if !initialized && cs.State.Waiting != nil {
			cs.State.Waiting.Reason = "PodInitializing"
		}
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			exited++
			if cs.State.Terminated.ExitCode != 0 {
				failed++
			}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	n := len(pod.Spec.Containers)
	switch {
	case ended && j.State == "COMPLETED" && exited == n && failed == 0:
		st.Phase = corev1.PodSucceeded
	case ended:
		st.Phase = corev1.PodFailed
		if r := terminalReason(j.State); r != "" && r != "Cancelled" {
			st.Reason = r
		}
		if !j.Known && exited == n && failed == 0 {
			st.Phase = corev1.PodSucceeded // its record outlived the job in squeue
		}
	case !initialized:
		st.Phase = corev1.PodPending
	case running > 0:
		st.Phase = corev1.PodRunning
	case exited > 0:
		// Restarting, or every container has ended and the job is finishing
		// (COMPLETING): the phase waits for Slurm's last word, which says why
		// it ended (a time limit, say), since a terminal phase is final.
		st.Phase = corev1.PodRunning
	}

	ready := corev1.ConditionFalse
	if st.Phase == corev1.PodRunning && running == n {
		ready = corev1.ConditionTrue
	}
	initCond := corev1.ConditionFalse
	if initialized {
		initCond = corev1.ConditionTrue
	}
	st.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: initCond},
		{Type: corev1.ContainersReady, Status: ready},
		{Type: corev1.PodReady, Status: ready},
	}
	return st
}

func terminated(in instance) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{ExitCode: in.exitCode, Reason: "Completed",
		StartedAt: metav1.Time{Time: in.started}, FinishedAt: metav1.Time{Time: in.finished}}
	switch {
	case in.exitReason != "":
		t.Reason, t.Message = in.exitReason, in.exitMessage
	case in.exitCode != 0:
		t.Reason = "Error"
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// containers lists the pod's init containers, then its app containers.
func containers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}
