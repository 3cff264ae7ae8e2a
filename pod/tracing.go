package pod

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span names of the pod controller. A pod's start reads as one trace: pod.sync
// (with pod.resolve and provider.CreatePod inside) and then pod.status, the first
// status write, which continues the trace of the sync that created the pod. A
// pod.sync span is made only when the sync acts (vkubelet.action: create, update,
// refreshVolumes, markLost), not for the many syncs that find nothing to do.
const (
	spanSync    = "pod.sync"
	spanResolve = "pod.resolve"
	spanStatus  = "pod.status"
	spanDelete  = "pod.delete"
	spanRemove  = "pod.remove"
	spanPatch   = "api.patchStatus"
)

// startSpan starts a span about the pod with this key.
func (c *Controller) startSpan(ctx context.Context, name, key string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithAttributes(attribute.String("k8s.pod.key", key), attribute.String("k8s.node.name", c.nodeName)))
	return c.tracer.Start(ctx, name, opts...)
}

// endSpan ends span, recording err if there is one.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// continuedFrom is ctx with sc, when set and valid, as the parent of the spans
// started in it: the status write of a pod continues the trace of the sync that
// created it.
func continuedFrom(ctx context.Context, sc *trace.SpanContext) context.Context {
	if sc == nil || !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, *sc)
}
