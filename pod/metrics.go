package pod

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metrics are the pod controller's own Prometheus metrics: its queues, its calls to
// the provider and its writes to the API server.
type Metrics struct {
	providerCalls   *prometheus.CounterVec
	providerLatency *prometheus.HistogramVec
	apiWrites       *prometheus.CounterVec

	queueDepth          *prometheus.GaugeVec
	queueAdds           *prometheus.CounterVec
	queueLatency        *prometheus.HistogramVec
	queueWorkDuration   *prometheus.HistogramVec
	queueUnfinished     *prometheus.GaugeVec
	queueLongestRunning *prometheus.GaugeVec
	queueRetries        *prometheus.CounterVec

	// nodes says several nodes' controllers share the metrics (NewNodesMetrics);
	// their queues are counted by countedQueue and their depths by depths.
	nodes  bool
	depths *queueDepths
}

// NewNodesMetrics creates the metrics shared by the pod controllers of a
// process's nodes, unregistered: counts and histograms sum over the nodes, and
// the queues' depths too (a thousand nodes' series each would cost more than
// the nodes themselves). The queues' unfinished-work, longest-running and
// time-in-queue figures are not kept (see countedQueue).
func NewNodesMetrics() *Metrics {
	m := NewMetrics()
	m.nodes, m.depths = true, newQueueDepths()
	return m
}

// NewMetrics creates the metrics, unregistered.
func NewMetrics() *Metrics {
	const ns = "vkubelet"
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	return &Metrics{
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "provider_calls_total",
			Help: "Calls of the provider by the pod controller, by method and result (ok or error).",
		}, []string{"method", "result"}),
		providerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "provider_call_duration_seconds",
			Help: "Duration of provider calls by the pod controller.", Buckets: buckets,
		}, []string{"method"}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "pod_api_writes_total",
			Help: "Writes of the pod controller to the API server, by kind (status_patch, delete) and result.",
		}, []string{"kind", "result"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "depth", Help: "Current depth of the work queue.",
		}, []string{"name"}),
		queueAdds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "adds_total", Help: "Items added to the work queue.",
		}, []string{"name"}),
		queueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "Time an item waits in the queue before it is processed.", Buckets: buckets,
		}, []string{"name"}),
		queueWorkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "Time a sync of one item takes.", Buckets: buckets,
		}, []string{"name"}),
		queueUnfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration.",
		}, []string{"name"}),
		queueLongestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "Seconds the longest running sync has been running.",
		}, []string{"name"}),
		queueRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "retries_total", Help: "Items re-queued after a failure.",
		}, []string{"name"}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	collectors := []prometheus.Collector{m.providerCalls, m.providerLatency, m.apiWrites, m.queueAdds, m.queueWorkDuration, m.queueRetries}
	if m.nodes {
		collectors = append(collectors, m.depths)
	} else {
		collectors = append(collectors, m.queueDepth, m.queueLatency, m.queueUnfinished, m.queueLongestRunning)
	}
	for _, c := range collectors {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observeProviderCall starts timing a provider call; call the result with its error.
func (m *Metrics) observeProviderCall(method string) func(error) {
	start := time.Now()
	return func(err error) {
		m.providerLatency.WithLabelValues(method).Observe(time.Since(start).Seconds())
		m.providerCalls.WithLabelValues(method, result(err)).Inc()
	}
}

func (m *Metrics) observeStatusWrite() func(error) { return m.observeAPIWrite("status_patch") }

func (m *Metrics) observeAPIDelete() func(error) { return m.observeAPIWrite("delete") }

func (m *Metrics) observeAPIWrite(kind string) func(error) {
	return func(err error) { m.apiWrites.WithLabelValues(kind, result(err)).Inc() }
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// queueMetrics adapts the metrics to client-go's work queue.
func (m *Metrics) queueMetrics() workqueue.MetricsProvider { return queueMetricsProvider{m} }

type queueMetricsProvider struct{ m *Metrics }

func (p queueMetricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.m.queueDepth.WithLabelValues(name)
}

func (p queueMetricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.m.queueAdds.WithLabelValues(name)
}

func (p queueMetricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.m.queueLatency.WithLabelValues(name)
}

func (p queueMetricsProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.m.queueWorkDuration.WithLabelValues(name)
}

func (p queueMetricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queueUnfinished.WithLabelValues(name)
}

func (p queueMetricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queueLongestRunning.WithLabelValues(name)
}

func (p queueMetricsProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.m.queueRetries.WithLabelValues(name)
}
