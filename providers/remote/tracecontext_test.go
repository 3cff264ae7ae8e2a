package remote_test

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/providers/mock"
)

// spanRecorder is the mock noting the span context its calls arrive with.
type spanRecorder struct {
	*mock.Provider
	mu   sync.Mutex
	seen []trace.SpanContext
}

func (p *spanRecorder) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	p.seen = append(p.seen, trace.SpanContextFromContext(ctx))
	p.mu.Unlock()
	return p.Provider.GetPod(ctx, namespace, name)
}

// A call made in a span reaches the provider's process with that span as its
// remote parent (W3C traceparent in the call's metadata); a call made outside
// any span carries none.
func TestACallCarriesItsTraceContextToTheProvider(t *testing.T) {
	rec := &spanRecorder{Provider: newMock(t)}
	c := connect(t, serve(t, rec, "mock"))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	_, _ = c.GetPod(trace.ContextWithSpanContext(context.Background(), sc), "ns", "p")
	_, _ = c.GetPod(context.Background(), "ns", "p")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 2 {
		t.Fatalf("the provider saw %d calls, want 2", len(rec.seen))
	}
	if got := rec.seen[0]; got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() || !got.IsSampled() {
		t.Errorf("the provider's call ran in %+v, want the caller's span %+v as remote parent", got, sc)
	}
	if rec.seen[1].IsValid() {
		t.Errorf("a call outside any span arrived in span %+v", rec.seen[1])
	}
}
