package pod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vkubelet/vkubelet/resolve"
)

// resolveFailed handles a pod that cannot be resolved. A missing mandatory
// reference is reported the kubelet's way: a Warning Event "Failed", the pod Pending
// with every container Waiting in CreateContainerConfigError; the pod is synced
// again when the resolver sees the object appear. Any other error is retried.
func (c *Controller) resolveFailed(ctx context.Context, p *corev1.Pod, err error) error {
	msg := resolveMessage(err)
	reason := ReasonFailed
	var missing *resolve.MissingError
	if errors.As(err, &missing) {
		reason = missing.Reason() // upstream virtual-kubelet's name for it
	}
	c.recorder.Event(p, corev1.EventTypeWarning, reason, "Error: "+msg)
	if !resolve.IsMissing(err) {
		return fmt.Errorf("resolving %s: %w", keyOf(p), err)
	}
	c.log.Info("pod waits for a missing reference", "pod", keyOf(p), "missing", msg)
	// The kubelet's first status of a pod has a start time, whether or not its
	// containers could start; an active deadline counts from it (mergeStatus
	// keeps an earlier one).
	now := metav1.NewTime(c.clock.Now())
	status := &corev1.PodStatus{Phase: corev1.PodPending, StartTime: &now}
	waiting := func(cs []corev1.Container) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(cs))
		for _, ctr := range cs {
			out = append(out, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreateContainerConfigError, Message: msg}},
			})
		}
		return out
	}
	status.InitContainerStatuses = waiting(p.Spec.InitContainers)
	status.ContainerStatuses = waiting(p.Spec.Containers)
	return c.writeStatus(ctx, p, status, nil)
}

// resolveMessage is the kubelet's wording of a resolution error: the missing
// reference alone when that is what it is.
func resolveMessage(err error) string {
	var m *resolve.MissingError
	if errors.As(err, &m) {
		return m.Error()
	}
	return err.Error()
}

// providerFailed records err, the failure of a provider call for pod p, in an
// Event and (but for DeletePod) in the pod's status, and returns it wrapped.
func (c *Controller) providerFailed(ctx context.Context, p *corev1.Pod, method string, err error) error {
	msg := fmt.Sprintf("%s failed: %v", method, err)
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonProviderFailed, msg)
	if method != "DeletePod" {
		now := metav1.NewTime(c.clock.Now()) // as resolveFailed's, kept if the pod has one
		if werr := c.writeStatus(ctx, p, &corev1.PodStatus{
			Phase: p.Status.Phase, Reason: ReasonProviderFailed, Message: msg, StartTime: &now,
		}, nil); werr != nil {
			c.log.Warn("cannot record provider failure in pod status", "pod", keyOf(p), "error", werr)
		}
	}
	return fmt.Errorf("%s %s: %w", method, keyOf(p), err)
}

// markLost ends a pod that the provider lost and may not restart.
func (c *Controller) markLost(ctx context.Context, p *corev1.Pod) (err error) {
	ctx, sync := c.startSpan(ctx, spanSync, keyOf(p), trace.WithAttributes(attribute.String("vkubelet.action", "markLost")))
	defer func() { endSpan(sync, err) }()
	msg := "the provider no longer runs this pod and its restartPolicy Never forbids starting it again"
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonProviderLost, msg)
	status := &corev1.PodStatus{Phase: corev1.PodFailed, Reason: ReasonProviderLost, Message: msg,
		ContainerStatuses: terminatedAll(p.Status.ContainerStatuses, ReasonProviderLost, msg)}
	return c.writeStatus(ctx, p, status, nil)
}

// terminatedAll is cs with each container not known to have terminated shown
// terminated for reason: the node knows it no longer runs but not how it ended,
// so the exit code is 137, a kill's.
func terminatedAll(cs []corev1.ContainerStatus, reason, msg string) []corev1.ContainerStatus {
	if len(cs) == 0 {
		return nil // nothing reported: nothing to say of them
	}
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, s := range cs {
		if s.State.Terminated == nil {
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: reason, Message: msg,
			}}
			s.Ready, s.Started = false, ptr.To(false)
		}
		out = append(out, s)
	}
	return out
}
