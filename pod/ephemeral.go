package pod

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// ReasonEphemeralContainersNotSupported is the waiting reason of the ephemeral
// containers of a pod whose provider does not run them, and the reason of the
// Warning Event that says so.
const ReasonEphemeralContainersNotSupported = "EphemeralContainersNotSupported"

// runsEphemeral reports whether the provider runs ephemeral containers, so that
// adding one to a pod is an update it must hear about.
func (c *Controller) runsEphemeral() bool {
	return provider.RunsEphemeralContainers(c.provider)
}

// reportEphemeralNotRun gives each ephemeral container of p that has no status yet
// a Waiting one saying that this node cannot run it, and records a Warning Event.
// `kubectl debug` prints a waiting container's message while it waits for the
// container to start, so the user learns why it never does.
func (c *Controller) reportEphemeralNotRun(ctx context.Context, p *corev1.Pod) error {
	msg := fmt.Sprintf("the provider of node %s does not run ephemeral containers", c.nodeName)
	statuses, added := ephemeralNotRun(p, msg)
	if len(added) == 0 {
		return nil
	}
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonEphemeralContainersNotSupported,
		fmt.Sprintf("Ephemeral container %s not started: %s", strings.Join(added, ", "), msg))
	// Phase, reason and message as the API has them: the provider owns them, and
	// mergeStatus takes them from the status it is given.
	return c.writeStatus(ctx, p, &corev1.PodStatus{
		Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message,
		EphemeralContainerStatuses: statuses,
	}, nil)
}

// ephemeralNotRun returns p's ephemeral container statuses with a Waiting status
// (reason ReasonEphemeralContainersNotSupported, message msg) for each ephemeral
// container that has none, and the names of those containers; no names when every
// one has a status.
func ephemeralNotRun(p *corev1.Pod, msg string) (statuses []corev1.ContainerStatus, added []string) {
	statuses = slices.Clone(p.Status.EphemeralContainerStatuses)
	for _, ec := range p.Spec.EphemeralContainers {
		if findContainerStatus(p.Status.EphemeralContainerStatuses, ec.Name) != nil {
			continue
		}
		added = append(added, ec.Name)
		statuses = append(statuses, corev1.ContainerStatus{
			Name: ec.Name, Image: ec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: ReasonEphemeralContainersNotSupported, Message: msg,
			}},
		})
	}
	if len(added) == 0 {
		return nil, nil
	}
	return statuses, added
}

// startedEnv is the environment of a running pod's containers on an update: a
// container running keeps the one it started with (started), as the kubelet
// never changes a running container's; any other (one waiting to be created,
// an ephemeral container added since) gets its environment as resolved now
// (now), as the kubelet resolves it when it starts the container: a
// variable from an annotation added since, say, reaches a container that could
// not start without it. running reports whether a container runs. started is
// returned itself when every container keeps its own; it is shared and never
// changed.
func startedEnv(started, now map[string][]corev1.EnvVar, running func(name string) bool) map[string][]corev1.EnvVar {
	var out map[string][]corev1.EnvVar
	for name, env := range now {
		if old, ok := started[name]; ok && (running(name) || slices.Equal(old, env)) {
			continue
		}
		if out == nil {
			out = maps.Clone(started)
		}
		out[name] = env
	}
	if out == nil {
		return started
	}
	return out
}

// containerRunning reports whether status shows container name running.
func containerRunning(status *corev1.PodStatus, name string) bool {
	for _, list := range [][]corev1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return list[i].State.Running != nil
			}
		}
	}
	return false
}
