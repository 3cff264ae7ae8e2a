package shrinking

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// recorder is a workqueue.MetricsProvider that keeps what each metric was told.
type recorder struct {
	mu     sync.Mutex
	values map[string]float64 // gauges and counters; histograms' sums
	counts map[string]int     // histograms' observations
}

func newRecorder() *recorder {
	return &recorder{values: map[string]float64{}, counts: map[string]int{}}
}

type metric struct {
	r    *recorder
	name string
}

func (m metric) Inc()          { m.r.mu.Lock(); m.r.values[m.name]++; m.r.mu.Unlock() }
func (m metric) Dec()          { m.r.mu.Lock(); m.r.values[m.name]--; m.r.mu.Unlock() }
func (m metric) Set(v float64) { m.r.mu.Lock(); m.r.values[m.name] = v; m.r.mu.Unlock() }
func (m metric) Observe(v float64) {
	m.r.mu.Lock()
	m.r.values[m.name] += v
	m.r.counts[m.name]++
	m.r.mu.Unlock()
}

func (r *recorder) NewDepthMetric(n string) workqueue.GaugeMetric  { return metric{r, n + " depth"} }
func (r *recorder) NewAddsMetric(n string) workqueue.CounterMetric { return metric{r, n + " adds"} }
func (r *recorder) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return metric{r, n + " latency"}
}
func (r *recorder) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return metric{r, n + " work"}
}
func (r *recorder) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return metric{r, n + " unfinished"}
}
func (r *recorder) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return metric{r, n + " longest"}
}
func (r *recorder) NewRetriesMetric(n string) workqueue.CounterMetric {
	return metric{r, n + " retries"}
}

func (r *recorder) snapshot() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.values, r.counts)
}

// counted is the snapshot without the gauges the measuring sets.
func (r *recorder) counted() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	values := map[string]float64{}
	for k, v := range r.values {
		if !strings.HasSuffix(k, " unfinished") && !strings.HasSuffix(k, " longest") {
			values[k] = v
		}
	}
	return fmt.Sprint(values, r.counts)
}

func (r *recorder) value(name string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.values[name]
}

func TestAQueueWithMetricsReportsWhatClientGosReports(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	theirs, ours := newRecorder(), newRecorder()
	queues := []workqueue.TypedInterface[string]{
		workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "sync", MetricsProvider: theirs, Clock: clk}),
		NewWithMetrics("sync", ours, clk),
	}
	each := func(f func(q workqueue.TypedInterface[string])) {
		for _, q := range queues {
			f(q)
		}
	}
	get := func(want string) {
		t.Helper()
		each(func(q workqueue.TypedInterface[string]) {
			if item, _ := q.Get(); item != want {
				t.Fatalf("Get() = %q, want %q", item, want)
			}
		})
	}
	each(func(q workqueue.TypedInterface[string]) { q.Add("a"); q.Add("b"); q.Add("a") })
	clk.Step(time.Second)
	get("a")
	each(func(q workqueue.TypedInterface[string]) { q.Add("a") }) // again while handled
	clk.Step(2 * time.Second)
	get("b")
	clk.Step(3 * time.Second)
	each(func(q workqueue.TypedInterface[string]) { q.Done("a"); q.Done("b") })
	get("a")

	// The unfinished work of "a", handed out: both queues measure it on
	// their tickers, which start when their goroutines do.
	deadline := time.Now().Add(10 * time.Second)
	for theirs.snapshot() != ours.snapshot() || theirs.value("sync unfinished") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("client-go's queue reported\n%s\nours\n%s", theirs.snapshot(), ours.snapshot())
		}
		clk.Step(500 * time.Millisecond)
		time.Sleep(5 * time.Millisecond) // for both measurements of this step
	}
	each(func(q workqueue.TypedInterface[string]) { q.Done("a") })
	if got := theirs.counted(); got != ours.counted() {
		t.Errorf("client-go's queue reported\n%s\nours\n%s", got, ours.counted())
	}
	each(func(q workqueue.TypedInterface[string]) { q.ShutDown() })

	q := queues[1].(*Queue)
	if q.metrics.addTimes != nil || q.metrics.processingStartTimes != nil {
		t.Errorf("an empty queue keeps its item times: %v, %v", q.metrics.addTimes, q.metrics.processingStartTimes)
	}
	select {
	case <-q.metrics.stop:
	default:
		t.Error("ShutDown left the measuring running")
	}
}
