package pod

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ReasonDeadlineExceeded is the reason, in its status and its Event, of a pod
// stopped for running longer than its spec.activeDeadlineSeconds (the kubelet's).
const ReasonDeadlineExceeded = "DeadlineExceeded"

// deadlineLeft is how long pod p may still run under its
// spec.activeDeadlineSeconds, counted as the kubelet counts it from the pod's
// status.startTime; fromProvider's start time stands in until the API has one.
// ok is false when no deadline applies: none set, no start time yet, or the pod
// finished.
func deadlineLeft(p *corev1.Pod, fromProvider *corev1.PodStatus, now time.Time) (left time.Duration, ok bool) {
	ads := p.Spec.ActiveDeadlineSeconds
	if ads == nil || isTerminal(&p.Status) || isTerminal(fromProvider) {
		return 0, false
	}
	start := p.Status.StartTime
	if start == nil {
		start = fromProvider.StartTime
	}
	if start == nil {
		return 0, false
	}
	return start.Add(time.Duration(*ads) * time.Second).Sub(now), true
}

// stopAtDeadline ends a pod that has run past its active deadline, as the
// kubelet does: an Event (Normal, as the kubelet's), the pod Failed with reason DeadlineExceeded, and
// the provider asked to stop it within its grace period. The pod stays in the
// API, terminal; the provider's reports of its containers stopping are still
// merged into its status (statusHandler), and it is never started again.
//
// The provider is asked first: if it cannot be reached, nothing is written and
// the check is retried, so the API never shows a pod Failed that still runs
// with nobody stopping it.
func (c *Controller) stopAtDeadline(ctx context.Context, key string, st podState, cached *podwire.Pod, fromProvider *corev1.PodStatus) (err error) {
	ctx, span := c.startSpan(ctx, spanSync, key, trace.WithAttributes(attribute.String("vkubelet.action", "activeDeadline")))
	defer func() { endSpan(span, err) }()
	p, err := cached.Decode()
	if err != nil {
		return err
	}
	msg := deadlineMessage(p)
	if !st.deleteRequested {
		// Once: a check before the cache shows the pod Failed only writes again.
		if err := c.deleteFromProvider(ctx, p); err != nil {
			return err
		}
		c.state.updateIfExists(key, func(s *podState) { s.deleteRequested = true })
		c.recorder.Event(p, corev1.EventTypeNormal, ReasonDeadlineExceeded, msg)
		c.log.Info("pod stopped at its active deadline", "pod", key)
	}
	status := fromProvider.DeepCopy()
	status.Phase, status.Reason, status.Message = corev1.PodFailed, ReasonDeadlineExceeded, msg
	return c.writeStatus(ctx, p, status, nil)
}

// failUnstartedAtDeadline ends a pod whose active deadline passed before the
// provider took it on: it waited for a missing reference, or the provider kept
// refusing it. The kubelet counts such a pod's deadline too, from the start time
// of its first status, and ends it the same way; there is nothing to stop.
// Called by syncHandler, which then leaves the terminal pod alone.
func (c *Controller) failUnstartedAtDeadline(ctx context.Context, p *corev1.Pod) error {
	msg := deadlineMessage(p)
	c.recorder.Event(p, corev1.EventTypeNormal, ReasonDeadlineExceeded, msg)
	c.log.Info("pod failed at its active deadline before the provider took it on", "pod", keyOf(p))
	return c.writeStatus(ctx, p, &corev1.PodStatus{Phase: corev1.PodFailed, Reason: ReasonDeadlineExceeded, Message: msg}, nil)
}

func deadlineMessage(p *corev1.Pod) string {
	return fmt.Sprintf("Pod ran for longer than its activeDeadlineSeconds (%ds) allow", ptr.Deref(p.Spec.ActiveDeadlineSeconds, 0))
}
