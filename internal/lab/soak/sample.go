package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// Sample is what the node process holds at one moment of the soak.
type Sample struct {
	// Seconds since the churn began.
	Seconds float64 `json:"s"`
	// HeapMiB is the live heap after a forced collection (what the process
	// keeps), RSSMiB its resident memory (the heap's headroom included).
	HeapMiB    float64 `json:"heap_mib"`
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines float64 `json:"goroutines"`
	// FDs are the process's open file descriptors, Sockets those of them that
	// are sockets (the API server's connections, the kubelet API's clients,
	// listeners).
	FDs     float64 `json:"fds"`
	Sockets float64 `json:"sockets"`
	// ProviderPods are the pods the provider reports (its records, read
	// through the kubelet API's /metrics/resource); APIPods the pods bound to
	// the node in the API server, Terminating ones included.
	ProviderPods float64 `json:"provider_pods"`
	APIPods      float64 `json:"api_pods"`
	// QueuedPods is the sum of the node's work queues' depths.
	QueuedPods float64 `json:"queued"`
	CPUSeconds float64 `json:"cpu_s"`
}

// figures names a sample's figures that must stay flat, with their limits: the
// order in which they are reported.
var figures = []struct {
	name  string
	get   func(Sample) float64
	limit Limit
}{
	{"heap_mib", func(s Sample) float64 { return s.HeapMiB }, Limit{Share: 0.05, Floor: 1}},
	{"rss_mib", func(s Sample) float64 { return s.RSSMiB }, Limit{Share: 0.05, Floor: 2}},
	{"goroutines", func(s Sample) float64 { return s.Goroutines }, Limit{Share: 0.05, Floor: 10}},
	{"fds", func(s Sample) float64 { return s.FDs }, Limit{Share: 0.05, Floor: 5}},
	{"sockets", func(s Sample) float64 { return s.Sockets }, Limit{Share: 0.05, Floor: 5}},
	{"provider_pods", func(s Sample) float64 { return s.ProviderPods }, Limit{Share: 0.02, Floor: 5}},
}

// sampler reads a Sample of the node process.
type sampler struct {
	node       *proc.Child
	metricsURL string // the node's --metrics-addr, as http://host:port
	// kubeletAPI is a client of the node's kubelet API.
	kubeletAPI *rest.RESTClient
	// apiPods counts the pods bound to the node in the API server.
	apiPods func() int
}

func (s *sampler) sample(ctx context.Context, since time.Time) (Sample, error) {
	out := Sample{Seconds: time.Since(since).Seconds(), APIPods: float64(s.apiPods())}
	var err error
	if out.HeapMiB, err = proc.LiveHeapMiB(ctx, s.metricsURL, ""); err != nil {
		return out, err
	}
	u, err := s.node.Usage()
	if err != nil {
		return out, err
	}
	out.RSSMiB, out.CPUSeconds = u.RSSMiB, u.CPUSeconds
	fds, sockets, err := s.node.Descriptors()
	if err != nil {
		return out, err
	}
	out.FDs, out.Sockets = float64(fds), float64(sockets)
	err = proc.Scrape(ctx, http.DefaultClient, s.metricsURL+"/metrics", func(name string, labels map[string]string, v float64) {
		switch name {
		case "go_goroutines":
			out.Goroutines = v
		case "vkubelet_workqueue_depth":
			out.QueuedPods += v
		}
	})
	if err != nil {
		return out, err
	}
	n, err := s.providerPods(ctx)
	out.ProviderPods = float64(n)
	return out, err
}

// providerPods counts the pods of the provider's resource metrics, read from
// the kubelet API as the metrics-server reads them.
func (s *sampler) providerPods(ctx context.Context) (int, error) {
	body, err := s.kubeletAPI.Get().AbsPath("/metrics/resource").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the provider's pods from /metrics/resource: %w", err)
	}
	pods := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if name, _, _, ok := proc.ParseSample(sc.Text()); ok && name == "pod_cpu_usage_seconds_total" {
			pods++
		}
	}
	return pods, sc.Err()
}
