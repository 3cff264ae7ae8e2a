package mock

import (
	"context"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// The synthetic usage model. A running container uses half of its CPU and memory
// requests, or 10m CPU and 16Mi of memory when it requests none; the node adds 100m
// and 256Mi of its own. Cumulative CPU grows at that rate from the container's start
// (from the node's start, and monotonically, for the node).
const (
	defaultContainerNanoCores  = 10_000_000 // 10m
	defaultContainerWorkingSet = 16 << 20
	systemNanoCores            = 100_000_000 // 100m
	systemWorkingSet           = 256 << 20
)

type usage struct {
	nanoCores  uint64 // current rate, in billionths of a core
	coreNanos  uint64 // cumulative, in core-nanoseconds
	workingSet uint64 // bytes
}

func (u *usage) add(o usage) {
	u.nanoCores += o.nanoCores
	u.coreNanos += o.coreNanos
	u.workingSet += o.workingSet
}

type containerSample struct {
	name  string
	start time.Time
	usage
}

type podSample struct {
	pod        *corev1.Pod // the record's pod: read only
	start      time.Time
	containers []containerSample
	usage
}

type nodeSample struct {
	now       time.Time
	available *uint64 // memory capacity less working set, if the node has a capacity
	pods      []podSample
	usage
}

// containerUsage is the usage of container c, started at start, at now.
func containerUsage(c *corev1.Container, start, now time.Time) usage {
	u := usage{nanoCores: defaultContainerNanoCores, workingSet: defaultContainerWorkingSet}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && q.Sign() > 0 {
		u.nanoCores = uint64(q.MilliValue()) * 1_000_000 / 2
	}
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok && q.Sign() > 0 {
		u.workingSet = uint64(q.Value()) / 2
	}
	if elapsed := now.Sub(start); elapsed > 0 {
		u.coreNanos = uint64(float64(u.nanoCores) * elapsed.Seconds())
	}
	return u
}

// sample measures the node and its running pods now.
func (p *Provider) sample() nodeSample {
	now, recs := p.snapshot()
	n := nodeSample{now: now}
	n.nanoCores, n.workingSet = systemNanoCores, systemWorkingSet
	for _, rec := range recs {
		if !rec.runningAt(now) {
			continue // no container has started
		}
		ps := podSample{pod: rec.pod, start: rec.running}
		add := func(c *corev1.Container) {
			cs := containerSample{name: c.Name, start: rec.running, usage: containerUsage(c, rec.running, now)}
			ps.containers = append(ps.containers, cs)
			ps.add(cs.usage)
		}
		for i := range rec.pod.Spec.InitContainers {
			if isSidecar(rec.pod.Spec.InitContainers[i]) {
				add(&rec.pod.Spec.InitContainers[i])
			}
		}
		for i := range rec.pod.Spec.Containers {
			add(&rec.pod.Spec.Containers[i])
		}
		n.pods = append(n.pods, ps)
		n.nanoCores += ps.nanoCores
		n.workingSet += ps.workingSet
	}

	p.mu.Lock()
	// The node's cumulative CPU integrates its rate, so that it never goes down when
	// pods go away.
	if dt := now.Sub(p.cpuSampledAt); dt > 0 {
		p.cpuCoreNanos += uint64(float64(n.nanoCores) * dt.Seconds())
		p.cpuSampledAt = now
	}
	n.coreNanos = p.cpuCoreNanos
	if capacity := p.memoryCapacityLocked(); capacity > 0 {
		n.available = ptr.To(uint64(0))
		if capacity > n.workingSet {
			*n.available = capacity - n.workingSet
		}
	}
	p.mu.Unlock()
	return n
}

// GetStatsSummary returns a synthetic /stats/summary: the node and every running pod
// with its running containers, with CPU and memory figures from the usage model above.
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	n := p.sample()
	now := metav1.NewTime(n.now)
	cpu := func(u usage) *statsv1alpha1.CPUStats {
		return &statsv1alpha1.CPUStats{Time: now, UsageNanoCores: ptr.To(u.nanoCores), UsageCoreNanoSeconds: ptr.To(u.coreNanos)}
	}
	memory := func(u usage, available *uint64) *statsv1alpha1.MemoryStats {
		return &statsv1alpha1.MemoryStats{
			Time: now, AvailableBytes: available, UsageBytes: ptr.To(u.workingSet),
			WorkingSetBytes: ptr.To(u.workingSet), RSSBytes: ptr.To(u.workingSet),
			PageFaults: ptr.To(uint64(0)), MajorPageFaults: ptr.To(uint64(0)),
		}
	}
	summary := &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName:  p.nodeName,
			StartTime: metav1.NewTime(p.started),
			CPU:       cpu(n.usage),
			Memory:    memory(n.usage, n.available),
		},
		Pods: make([]statsv1alpha1.PodStats, 0, len(n.pods)),
	}
	for _, ps := range n.pods {
		pod := statsv1alpha1.PodStats{
			PodRef:     statsv1alpha1.PodReference{Name: ps.pod.Name, Namespace: ps.pod.Namespace, UID: string(ps.pod.UID)},
			StartTime:  metav1.NewTime(ps.start),
			Containers: make([]statsv1alpha1.ContainerStats, 0, len(ps.containers)),
			CPU:        cpu(ps.usage),
			Memory:     memory(ps.usage, nil),
		}
		for _, cs := range ps.containers {
			pod.Containers = append(pod.Containers, statsv1alpha1.ContainerStats{
				Name:      cs.name,
				StartTime: metav1.NewTime(cs.start),
				CPU:       cpu(cs.usage),
				Memory:    memory(cs.usage, nil),
			})
		}
		summary.Pods = append(summary.Pods, pod)
	}
	return summary, nil
}

// GetMetricsResource returns the families of the kubelet's /metrics/resource that
// metrics-server reads, from the same figures as GetStatsSummary. scrape_error is
// always 0.
func (p *Provider) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	n := p.sample()
	ts := ptr.To(n.now.UnixMilli())
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
	nodeCPU.Metric = []*dto.Metric{counter(nil, seconds(n.coreNanos))}
	nodeMem := family("node_memory_working_set_bytes", "Current working set of the node in bytes", dto.MetricType_GAUGE)
	nodeMem.Metric = []*dto.Metric{gauge(nil, float64(n.workingSet))}
	podCPU := family("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER)
	podMem := family("pod_memory_working_set_bytes", "Current working set of the pod in bytes", dto.MetricType_GAUGE)
	ctrCPU := family("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER)
	ctrMem := family("container_memory_working_set_bytes", "Current working set of the container in bytes", dto.MetricType_GAUGE)
	ctrStart := family("container_start_time_seconds", "Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE)
	for _, ps := range n.pods {
		ns, name := ps.pod.Namespace, ps.pod.Name
		podCPU.Metric = append(podCPU.Metric, counter(labels("namespace", ns, "pod", name), seconds(ps.coreNanos)))
		podMem.Metric = append(podMem.Metric, gauge(labels("namespace", ns, "pod", name), float64(ps.workingSet)))
		for _, cs := range ps.containers {
			l := func() []*dto.LabelPair { return labels("container", cs.name, "namespace", ns, "pod", name) }
			ctrCPU.Metric = append(ctrCPU.Metric, counter(l(), seconds(cs.coreNanos)))
			ctrMem.Metric = append(ctrMem.Metric, gauge(l(), float64(cs.workingSet)))
			ctrStart.Metric = append(ctrStart.Metric, gauge(l(), float64(cs.start.UnixNano())/1e9))
		}
	}
	scrapeErr := family("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE)
	scrapeErr.Metric = []*dto.Metric{{Gauge: &dto.Gauge{Value: ptr.To(0.0)}}}

	// Families with no sample (no pod running) are left out, as the kubelet does.
	var out []*dto.MetricFamily
	for _, f := range []*dto.MetricFamily{ctrCPU, ctrMem, ctrStart, nodeCPU, nodeMem, podCPU, podMem, scrapeErr} {
		if len(f.Metric) > 0 {
			out = append(out, f)
		}
	}
	return out, nil
}
