package agent

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/tools/metrics"
)

// client-go's own measurements of the agent's API requests — latency, results,
// retries, the rate limiter's wait — as Prometheus metrics under the names the
// kubelet exposes them (rest_client_*), next to vkubelet's. client-go takes one
// set of metrics per process, before its first request: any client of the
// process may run before a node starts (a NodeSet's shared client, the CSR
// approver beside the nodes of vkubeletctl up), and client-go reads the set
// without a lock, so it is handed over when the process starts (init).
var (
	restClientLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_request_duration_seconds", Help: "Request latency of the agent's API requests, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"verb", "host"})
	restClientRateLimiterLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_rate_limiter_duration_seconds", Help: "Time the agent's API requests waited for client-side rate limiting, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"verb", "host"})
	restClientResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total", Help: "The agent's API requests, by status code, method and host.",
	}, []string{"code", "method", "host"})
	restClientRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_request_retries_total", Help: "Retries of the agent's API requests, by status code, method and host.",
	}, []string{"code", "method", "host"})
)

func init() {
	metrics.Register(metrics.RegisterOpts{
		RequestLatency:     latencyByVerbAndHost{restClientLatency},
		RateLimiterLatency: latencyByVerbAndHost{restClientRateLimiterLatency},
		RequestResult:      resultByCode{restClientResults},
		RequestRetry:       retryByCode{restClientRetries},
	})
}

// clientMetrics are the collectors client-go reports to, for a node's registry.
func clientMetrics() []prometheus.Collector {
	return []prometheus.Collector{restClientLatency, restClientRateLimiterLatency, restClientResults, restClientRetries}
}

type latencyByVerbAndHost struct{ h *prometheus.HistogramVec }

// Observe keeps the host, not the URL: paths name objects, one series each.
func (l latencyByVerbAndHost) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type resultByCode struct{ c *prometheus.CounterVec }

func (r resultByCode) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

type retryByCode struct{ c *prometheus.CounterVec }

func (r retryByCode) IncrementRetry(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

// processMetrics are the collectors of what belongs to the process rather than a
// node: the Go runtime's, the process's, client-go's, and apiRequests, the
// requests of the API client (a node's own, or the one nodes share).
func processMetrics(apiRequests *prometheus.CounterVec) []prometheus.Collector {
	return append(clientMetrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), apiRequests)
}
