package kubeletapi

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the kubelet API's own metrics: what it turned away.
type Metrics struct {
	denied       *prometheus.CounterVec
	refusedConns prometheus.Counter
}

// NewMetrics makes the kubelet API's metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vkubelet", Subsystem: "kubelet_api", Name: "requests_denied_total",
			Help: "Requests to the kubelet API refused: 401 (not authenticated) or 403 (not authorized), by nodes subresource.",
		}, []string{"code", "subresource"}),
		refusedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vkubelet", Subsystem: "kubelet_api", Name: "connections_refused_total",
			Help: "Connections to the kubelet port closed at once because their client, or all clients, had too many open.",
		}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.denied, m.refusedConns} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
