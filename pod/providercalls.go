package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// callProvider runs one provider call for pod p, counting it in the metrics and, on
// failure, recording an Event and putting the reason in the pod's status.
func (c *Controller) callProvider(ctx context.Context, p *corev1.Pod, method string, call func(context.Context) error) error {
	if err := c.invokeProvider(ctx, p, method, call); err != nil {
		return c.providerFailed(ctx, p, method, err)
	}
	return nil
}

// invokeProvider runs one provider call for pod p, counted in the metrics and
// traced, and returns its error as the provider gave it.
func (c *Controller) invokeProvider(ctx context.Context, p *corev1.Pod, method string, call func(context.Context) error) error {
	done := c.metrics.observeProviderCall(method)
	ctx, span := c.startSpan(ctx, "provider."+method, keyOf(p), trace.WithSpanKind(trace.SpanKindClient))
	err := call(ctx)
	endSpan(span, err)
	done(err)
	return err
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
