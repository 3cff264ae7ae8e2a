package pod

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestAPodsStartIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, newPod("a"))
	f.tracer = tp.Tracer("test")
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	sync, create, status, patch := spans[spanSync], spans["provider.CreatePod"], spans[spanStatus], spans[spanPatch]
	if sync == nil || create == nil || status == nil || patch == nil || spans[spanResolve] == nil {
		t.Fatalf("spans %v, want %s, %s, provider.CreatePod, %s and %s", keys(spans), spanSync, spanResolve, spanStatus, spanPatch)
	}
	trace := sync.SpanContext().TraceID()
	for _, s := range []sdktrace.ReadOnlySpan{create, status, patch, spans[spanResolve]} {
		if s.SpanContext().TraceID() != trace {
			t.Errorf("span %s is in trace %s, want the sync's %s", s.Name(), s.SpanContext().TraceID(), trace)
		}
	}
	if create.Parent().SpanID() != sync.SpanContext().SpanID() || status.Parent().SpanID() != sync.SpanContext().SpanID() ||
		patch.Parent().SpanID() != status.SpanContext().SpanID() {
		t.Errorf("parents: CreatePod ← %s, status ← %s, patch ← %s; want sync, sync, status",
			create.Parent().SpanID(), status.Parent().SpanID(), patch.Parent().SpanID())
	}
	// Later status writes start traces of their own.
	rec2 := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec2)
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	for _, s := range rec2.Ended() {
		if s.Name() == spanStatus && s.SpanContext().TraceID() == trace {
			t.Error("a second status write continued the pod's start trace")
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
