package agent_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/tracing"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// otlpReceiver is an OTLP/gRPC trace receiver that keeps what it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracev1.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans of the trace that holds a span named name with the
// given pod key, or nil.
func (r *otlpReceiver) trace(name, podKey string) []*tracev1.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var id []byte
	for _, s := range r.spans {
		if s.Name == name && spanAttr(s, "k8s.pod.key") == podKey {
			id = s.TraceId
		}
	}
	if id == nil {
		return nil
	}
	var out []*tracev1.Span
	for _, s := range r.spans {
		if string(s.TraceId) == string(id) {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracev1.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// TestAPodsStartIsTracedToAnOTLPReceiver runs a node that sends its traces to an
// OTLP receiver and checks the trace of one pod's start: the sync, with the
// resolution and the provider's CreatePod in it, then the first status write
// with its API request, all in one trace.
func TestAPodsStartIsTracedToAnOTLPReceiver(t *testing.T) {
	const node = "vk-traced"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	startNode(t, node, mock.Config{}, func(c *agent.Config) {
		c.Tracing = tracing.Config{Endpoint: l.Addr().String(), Insecure: true, SamplingRatio: 1, BatchTimeout: 200 * time.Millisecond}
	})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "traced"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := ns + "/traced"
	var spans []*tracev1.Span
	want := []string{"pod.sync", "pod.resolve", "provider.CreatePod", "pod.status", "api.patchStatus"}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		spans = recv.trace("provider.CreatePod", key)
		names := map[string]bool{}
		for _, s := range spans {
			names[s.Name] = true
		}
		for _, w := range want {
			if !names[w] {
				return false, fmt.Sprintf("trace of %s has %v, want %v", key, names, want)
			}
		}
		return true, ""
	})
	byID := map[string]*tracev1.Span{}
	for _, s := range spans {
		byID[string(s.SpanId)] = s
	}
	parentOf := func(name string) string {
		for _, s := range spans {
			if s.Name == name {
				if p := byID[string(s.ParentSpanId)]; p != nil {
					return p.Name
				}
				return ""
			}
		}
		return ""
	}
	for child, parent := range map[string]string{"pod.resolve": "pod.sync", "provider.CreatePod": "pod.sync", "pod.status": "pod.sync", "api.patchStatus": "pod.status"} {
		if got := parentOf(child); got != parent {
			t.Errorf("parent of %s is %q, want %s", child, got, parent)
		}
	}
	// The trace as docs/RELIABILITY.md shows it.
	sort.Slice(spans, func(i, j int) bool { return spans[i].StartTimeUnixNano < spans[j].StartTimeUnixNano })
	start := spans[0].StartTimeUnixNano
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %-20s +%7.2f ms  %7.2f ms  (trace %s)", s.Name,
			float64(s.StartTimeUnixNano-start)/1e6, float64(s.EndTimeUnixNano-s.StartTimeUnixNano)/1e6, hex.EncodeToString(s.TraceId)[:8])
	}
	t.Logf("trace of the start of %s:%s", key, b.String())
}
