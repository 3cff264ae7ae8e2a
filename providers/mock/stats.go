package mock

import (
	"context"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/providers/providerutil"
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
		pod := rec.pod()
		ps := podSample{pod: pod, start: rec.running.Time()}
		add := func(c *corev1.Container) {
			cs := containerSample{name: c.Name, start: rec.running.Time(), usage: containerUsage(c, rec.running.Time(), now)}
			ps.containers = append(ps.containers, cs)
			ps.add(cs.usage)
		}
		for i := range pod.Spec.InitContainers {
			if isSidecar(pod.Spec.InitContainers[i]) {
				add(&pod.Spec.InitContainers[i])
			}
		}
		for i := range pod.Spec.Containers {
			add(&pod.Spec.Containers[i])
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
	pods := make([]providerutil.PodUsage, 0, len(n.pods))
	for _, ps := range n.pods {
		pu := providerutil.PodUsage{Namespace: ps.pod.Namespace, Name: ps.pod.Name,
			CPUCoreNanos: ps.coreNanos, WorkingSetBytes: ps.workingSet}
		for _, cs := range ps.containers {
			pu.Containers = append(pu.Containers, providerutil.ContainerUsage{Name: cs.name, Start: cs.start,
				CPUCoreNanos: cs.coreNanos, WorkingSetBytes: cs.workingSet})
		}
		pods = append(pods, pu)
	}
	return providerutil.ResourceMetrics(n.now, providerutil.NodeUsage{CPUCoreNanos: n.coreNanos, WorkingSetBytes: n.workingSet}, pods, false), nil
}
