package cri

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// Ephemeral containers (`kubectl debug`) run as the kubelet runs them: each is
// created in the pod's sandbox once it appears in the spec (init containers done or
// not), in the pod's network and IPC namespaces and, with targetContainerName, in the
// process namespace of that container's running instance; never restarted, never
// probed, reported in status.ephemeralContainerStatuses and left out of the pod's
// phase and readiness. A failed pull or create is retried with back-off, as for any
// container; once it ran, it stays as it ended.

// RunsEphemeralContainers says the provider runs ephemeral containers.
func (p *Provider) RunsEphemeralContainers() bool { return true }

// ephemeralContainers are the pod's ephemeral containers as containers: the fields
// are the same, the API only forbids some of them (ports, probes, resources).
func ephemeralContainers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.EphemeralContainers))
	for _, ec := range pod.Spec.EphemeralContainers {
		out = append(out, corev1.Container(ec.EphemeralContainerCommon))
	}
	return out
}

// ephemeralTarget is the targetContainerName of the pod's ephemeral container
// name, "" if it names none or name is no ephemeral container.
func ephemeralTarget(pod *corev1.Pod, name string) string {
	for _, ec := range pod.Spec.EphemeralContainers {
		if ec.Name == name {
			return ec.TargetContainerName
		}
	}
	return ""
}

// startEphemeral starts ephemeral container c if it never ran: the first time, or
// again after a failed pull or create. It reports whether it started it.
func (p *Provider) startEphemeral(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, env []corev1.EnvVar, creds []provider.RegistryCredential) bool {
	st := rec.ctr(c.Name)
	switch {
	case st.cur == nil:
		return p.tryStart(ctx, rec, pod, c, env, creds, st, false)
	case st.cur.State == runtimeapi.ContainerState_CONTAINER_CREATED:
		return p.startCreated(ctx, rec, c, st)
	}
	return false
}

// targetID is the runtime ID of the running instance of the container whose
// process namespace ephemeral container name joins, "" if it joins none. Like the
// kubelet, it refuses to start the container while its target does not run.
func targetID(rec *podRecord, pod *corev1.Pod, name string) (string, error) {
	target := ephemeralTarget(pod, name)
	if target == "" {
		return "", nil
	}
	if st := rec.ctrs[target]; st != nil && st.cur != nil && st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		return st.cur.Id, nil
	}
	return "", fmt.Errorf("unable to find target container %s", target)
}

// withTarget puts a container into the process namespace of container id, as the
// kubelet does when the pod's containers have process namespaces of their own (not
// with shareProcessNamespace or hostPID, whose namespace the container is in anyway).
func withTarget(ns *runtimeapi.NamespaceOption, id string) {
	if id != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, id
	}
}

// endEphemeral keeps what ran of the pod's ephemeral containers as their final
// state when their sandbox is gone (it died and is made anew): they are not
// started again in the new one. One still running then ended with it, for an
// unknown reason, as the kubelet says of a container it lost.
func endEphemeral(rec *podRecord, pod *corev1.Pod, now time.Time) {
	for _, ec := range pod.Spec.EphemeralContainers {
		st := rec.ctrs[ec.Name]
		if st == nil || st.cur == nil {
			continue
		}
		last := st.cur
		if last.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			ended := proto.Clone(last).(*runtimeapi.ContainerStatus)
			ended.State, ended.ExitCode, ended.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, 137, now.UnixNano()
			ended.Reason, ended.Message = "ContainerStatusUnknown", "The container was lost with the pod's sandbox"
			last = ended
		}
		if rec.ephemeralEnded == nil {
			rec.ephemeralEnded = map[string]*runtimeapi.ContainerStatus{}
		}
		rec.ephemeralEnded[ec.Name] = last
	}
}

// ephemeralStatuses are the statuses of the pod's ephemeral containers: as any
// container's, but never started nor ready, which only probes decide and
// ephemeral containers have none. Nil when the pod has none, so the API's are
// left alone.
func ephemeralStatuses(rec *podRecord, pod *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range ephemeralContainers(pod) {
		cs := containerStatus(rec, pod, &c, true)
		cs.Started, cs.Ready = nil, false
		out = append(out, cs)
	}
	return out
}
