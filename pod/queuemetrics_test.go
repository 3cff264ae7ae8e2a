package pod

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
)

// The queues of nodes sharing their metrics are counted without client-go's
// per-queue machinery: adds, retries and work summed over the nodes, the depth
// summed when gathered, and no goroutine per queue.
func TestQueuesOfNodesSharingMetricsAreCountedTogether(t *testing.T) {
	m := NewNodesMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	timer := sharedtimer.New(clk) // as the nodes of a process share one
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go timer.Run(ctx)
	c := &Controller{metrics: m, clock: clk, timer: timer, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	goroutines := runtime.NumGoroutine()
	var queues []*countedQueue
	for range 100 {
		queues = append(queues, c.newQueue("pod_sync", nil).(*countedQueue))
	}
	if n := runtime.NumGoroutine() - goroutines; n > 10 {
		t.Errorf("100 queues started %d goroutines; want none of their own", n)
	}
	q1, q2 := queues[0], queues[1]
	q1.Add("ns/a")
	q1.Add("ns/b")
	q2.Add("ns/c")
	q2.AddRateLimited("ns/d") // back-off 200 ms, then queued
	if got := depth(t, reg); got != 3 {
		t.Errorf("depth = %v, want 3", got)
	}
	stepUntil(t, clk, 200*time.Millisecond, "the retry after its back-off", func() bool { return depth(t, reg) == 4 })
	key, _ := q1.Get()
	c.process(context.Background(), q1, func(context.Context, string) error { return nil }, key)
	if n := testutil.ToFloat64(m.queueAdds.WithLabelValues("pod_sync")); n != 4 {
		t.Errorf("adds_total = %v, want 4", n)
	}
	if n := testutil.ToFloat64(m.queueRetries.WithLabelValues("pod_sync")); n != 1 {
		t.Errorf("retries_total = %v, want 1", n)
	}
	if n := testutil.CollectAndCount(m.queueWorkDuration); n != 1 {
		t.Errorf("work_duration_seconds series = %d, want 1", n)
	}
	for _, q := range queues {
		q.ShutDown()
	}
	if got := depth(t, reg); got != 0 {
		t.Errorf("depth once every queue shut down = %v, want 0 (no series)", got)
	}
}

// depth is the summed depth of the pod_sync queues, 0 if there is no series.
func depth(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "vkubelet_workqueue_depth" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == "pod_sync" {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
