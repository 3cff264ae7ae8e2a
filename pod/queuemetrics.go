package pod

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// The queues of nodes that share their metrics (NewNodesMetrics) are built
// without client-go's queue metrics: with them, each queue runs a goroutine that
// refreshes its unfinished-work gauges every 500 ms and keeps two maps of its
// items' times, which for a thousand nodes' three queues is 3000 goroutines
// waking 6000 times a second while nothing happens. Such a queue (countedQueue)
// counts its adds and retries itself, the dispatcher times each item's work, and
// the depth is summed over the queues when the metrics are gathered
// (queueDepths). What is not kept is each item's wait in the queue
// (queue_duration_seconds), which needs a time per queued item.

// countedQueue is a node's work queue counted in the shared metrics.
type countedQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	name          string
	adds, retries prometheus.Counter
	workDuration  prometheus.Observer
	depths        *queueDepths
}

func (q *countedQueue) Add(key string) {
	q.adds.Inc()
	q.TypedRateLimitingInterface.Add(key)
}

func (q *countedQueue) AddAfter(key string, d time.Duration) {
	q.adds.Inc()
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

func (q *countedQueue) AddRateLimited(key string) {
	q.adds.Inc()
	q.retries.Inc()
	q.TypedRateLimitingInterface.AddRateLimited(key)
}

// ShutDown also takes the queue out of the summed depth.
func (q *countedQueue) ShutDown() {
	q.depths.remove(q)
	q.TypedRateLimitingInterface.ShutDown()
}

// observeWork records how long one item's work took.
func (q *countedQueue) observeWork(d time.Duration) { q.workDuration.Observe(d.Seconds()) }

// workObserver is a queue that records its items' work itself.
type workObserver interface{ observeWork(time.Duration) }

// queueDepths sums the depth of the nodes' queues by name, when gathered.
type queueDepths struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	queues map[*countedQueue]struct{}
}

func newQueueDepths() *queueDepths {
	return &queueDepths{
		desc: prometheus.NewDesc("vkubelet_workqueue_depth", "Current depth of the work queue, summed over the process's nodes.",
			[]string{"name"}, nil),
		queues: map[*countedQueue]struct{}{},
	}
}

func (d *queueDepths) add(q *countedQueue) {
	d.mu.Lock()
	d.queues[q] = struct{}{}
	d.mu.Unlock()
}

func (d *queueDepths) remove(q *countedQueue) {
	d.mu.Lock()
	delete(d.queues, q)
	d.mu.Unlock()
}

func (d *queueDepths) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *queueDepths) Collect(ch chan<- prometheus.Metric) {
	sums := map[string]int{}
	d.mu.Lock()
	for q := range d.queues {
		sums[q.name] += q.Len()
	}
	d.mu.Unlock()
	for name, n := range sums {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(n), name)
	}
}

// countedQueueOf wraps q, a queue built without metrics, to count it in m.
func (m *Metrics) countedQueueOf(name string, q workqueue.TypedRateLimitingInterface[string]) *countedQueue {
	cq := &countedQueue{TypedRateLimitingInterface: q, name: name,
		adds: m.queueAdds.WithLabelValues(name), retries: m.queueRetries.WithLabelValues(name),
		workDuration: m.queueWorkDuration.WithLabelValues(name), depths: m.depths}
	m.depths.add(cq)
	return cq
}
