package providerutil

import (
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
)

// NodeUsage, PodUsage and ContainerUsage are the figures a provider measured, in
// the units the kubelet reports: cumulative CPU in core-nanoseconds, memory working
// set in bytes.
type NodeUsage struct {
	CPUCoreNanos, WorkingSetBytes uint64
}

// PodUsage is the usage of one pod and its containers.
type PodUsage struct {
	Namespace, Name               string
	CPUCoreNanos, WorkingSetBytes uint64
	Containers                    []ContainerUsage
}

// ContainerUsage is the usage of one container.
type ContainerUsage struct {
	Name                          string
	Start                         time.Time
	CPUCoreNanos, WorkingSetBytes uint64
}

// ResourceMetrics builds the metric families of the kubelet's /metrics/resource that
// metrics-server reads, stamped with at. Families without samples are left out, as
// the kubelet does; scrape_error is 1 when scrapeError.
func ResourceMetrics(at time.Time, node NodeUsage, pods []PodUsage, scrapeError bool) []*dto.MetricFamily {
	ts := ptr.To(at.UnixMilli())
	family := func(name, help string, t dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: ptr.To(name), Help: ptr.To(help), Type: t.Enum()}
	}
	labels := func(kv ...string) []*dto.LabelPair {
		pairs := make([]*dto.LabelPair, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			pairs = append(pairs, &dto.LabelPair{Name: ptr.To(kv[i]), Value: ptr.To(kv[i+1])})
		}
		return pairs
	}
	counter := func(l []*dto.LabelPair, v float64) *dto.Metric {
		return &dto.Metric{Label: l, Counter: &dto.Counter{Value: ptr.To(v)}, TimestampMs: ts}
	}
	gauge := func(l []*dto.LabelPair, v float64) *dto.Metric {
		return &dto.Metric{Label: l, Gauge: &dto.Gauge{Value: ptr.To(v)}, TimestampMs: ts}
	}
	seconds := func(coreNanos uint64) float64 { return float64(coreNanos) / 1e9 }

	nodeCPU := family("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER)
	nodeCPU.Metric = []*dto.Metric{counter(nil, seconds(node.CPUCoreNanos))}
	nodeMem := family("node_memory_working_set_bytes", "Current working set of the node in bytes", dto.MetricType_GAUGE)
	nodeMem.Metric = []*dto.Metric{gauge(nil, float64(node.WorkingSetBytes))}
	podCPU := family("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER)
	podMem := family("pod_memory_working_set_bytes", "Current working set of the pod in bytes", dto.MetricType_GAUGE)
	ctrCPU := family("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER)
	ctrMem := family("container_memory_working_set_bytes", "Current working set of the container in bytes", dto.MetricType_GAUGE)
	ctrStart := family("container_start_time_seconds", "Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE)
	for _, ps := range pods {
		podCPU.Metric = append(podCPU.Metric, counter(labels("namespace", ps.Namespace, "pod", ps.Name), seconds(ps.CPUCoreNanos)))
		podMem.Metric = append(podMem.Metric, gauge(labels("namespace", ps.Namespace, "pod", ps.Name), float64(ps.WorkingSetBytes)))
		for _, cs := range ps.Containers {
			l := func() []*dto.LabelPair {
				return labels("container", cs.Name, "namespace", ps.Namespace, "pod", ps.Name)
			}
			ctrCPU.Metric = append(ctrCPU.Metric, counter(l(), seconds(cs.CPUCoreNanos)))
			ctrMem.Metric = append(ctrMem.Metric, gauge(l(), float64(cs.WorkingSetBytes)))
			ctrStart.Metric = append(ctrStart.Metric, gauge(l(), float64(cs.Start.UnixNano())/1e9))
		}
	}
	scrape := 0.0
	if scrapeError {
		scrape = 1
	}
	scrapeErr := family("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE)
	scrapeErr.Metric = []*dto.Metric{{Gauge: &dto.Gauge{Value: ptr.To(scrape)}}}

	var out []*dto.MetricFamily
	for _, f := range []*dto.MetricFamily{ctrCPU, ctrMem, ctrStart, nodeCPU, nodeMem, podCPU, podMem, scrapeErr} {
		if len(f.Metric) > 0 {
			out = append(out, f)
		}
	}
	return out
}
