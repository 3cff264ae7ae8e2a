package interlink

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// A request to the plugin made in a span carries that span's W3C trace context
// (traceparent), so a plugin that traces continues the node's trace; one made
// outside any span carries none.
func TestARequestCarriesItsTraceContextToThePlugin(t *testing.T) {
	headers := make(chan string, 2)
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header.Get("traceparent")
		_, _ = w.Write([]byte("[]"))
	}))
	defer plugin.Close()
	p, err := New(Config{URL: plugin.URL, StateFile: filepath.Join(t.TempDir(), "state.json"), Timeout: providerutil.Duration{Duration: 5 * time.Second}},
		"node", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	var out []podStatus
	if err := p.do(trace.ContextWithSpanContext(context.Background(), sc), http.MethodGet, "/status", nil, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := <-headers, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Errorf("traceparent %q, want %q", got, want)
	}
	if err := p.do(context.Background(), http.MethodGet, "/status", nil, &out); err != nil {
		t.Fatal(err)
	}
	if got := <-headers; got != "" {
		t.Errorf("a request outside any span carried traceparent %q", got)
	}
}
