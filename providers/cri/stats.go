package cri

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// cpuSample is a cumulative CPU reading, to compute a rate from the next one.
type cpuSample struct {
	at        time.Time
	coreNanos uint64
}

type usage struct {
	nanoCores, coreNanos, workingSet, usageBytes, rss uint64
}

func (u *usage) add(o usage) {
	u.nanoCores += o.nanoCores
	u.coreNanos += o.coreNanos
	u.workingSet += o.workingSet
	u.usageBytes += o.usageBytes
	u.rss += o.rss
}

type containerSample struct {
	name  string
	start time.Time
	usage
}

type podSample struct {
	namespace, name, uid string
	start                time.Time
	containers           []containerSample
	usage
}

// rate turns the container's cumulative CPU into a rate since the last sample.
func (p *Provider) rate(id string, at time.Time, coreNanos uint64) uint64 {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	prev, ok := p.cpuSamples[id]
	p.cpuSamples[id] = cpuSample{at: at, coreNanos: coreNanos}
	if !ok || !at.After(prev.at) || coreNanos < prev.coreNanos {
		return 0
	}
	return uint64(float64(coreNanos-prev.coreNanos) / at.Sub(prev.at).Seconds())
}

// samplePods reads the running containers' stats from the runtime, grouped by pod.
func (p *Provider) samplePods(ctx context.Context) ([]podSample, error) {
	stats, err := p.runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{
		Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{labelNode: p.nodeName}},
	})
	if err != nil {
		return nil, errdefs.Unavailable("cri: container stats: %v", err)
	}
	list, err := p.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{labelNode: p.nodeName},
		},
	})
	if err != nil {
		return nil, errdefs.Unavailable("cri: containers: %v", err)
	}
	running := map[string]*runtimeapi.Container{}
	for _, c := range list.Containers {
		running[c.Id] = c
	}
	p.mu.Lock()
	starts := map[string]time.Time{}
	for _, rec := range p.pods {
		starts[string(rec.uid)] = rec.status.StartTime.Time
	}
	p.mu.Unlock()
	byUID := map[string]*podSample{}
	var order []string
	for _, s := range stats.Stats {
		c := running[s.GetAttributes().GetId()]
		if c == nil {
			continue
		}
		uid := c.Labels[labelPodUID]
		ps := byUID[uid]
		if ps == nil {
			ps = &podSample{namespace: c.Labels[labelPodNamespace], name: c.Labels[labelPodName], uid: uid, start: starts[uid]}
			byUID[uid] = ps
			order = append(order, uid)
		}
		cs := containerSample{name: c.GetMetadata().GetName(), start: time.Unix(0, c.CreatedAt)}
		if cpu := s.GetCpu(); cpu != nil {
			cs.coreNanos = cpu.GetUsageCoreNanoSeconds().GetValue()
			cs.nanoCores = cpu.GetUsageNanoCores().GetValue()
			if cs.nanoCores == 0 {
				cs.nanoCores = p.rate(c.Id, time.Unix(0, cpu.Timestamp), cs.coreNanos)
			}
		}
		if m := s.GetMemory(); m != nil {
			cs.workingSet = m.GetWorkingSetBytes().GetValue()
			cs.usageBytes = m.GetUsageBytes().GetValue()
			cs.rss = m.GetRssBytes().GetValue()
		}
		ps.containers = append(ps.containers, cs)
		ps.add(cs.usage)
	}
	out := make([]podSample, 0, len(order))
	for _, uid := range order {
		out = append(out, *byUID[uid])
	}
	return out, nil
}

// nodeUsage reads the host's CPU time (/proc/stat) and memory (/proc/meminfo).
func nodeUsage() (u usage, available uint64) {
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		fs := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal, in USER_HZ (100/s).
		for i, f := range fs {
			if i == 0 || i == 4 || i == 5 || i > 8 {
				continue
			}
			v, _ := strconv.ParseUint(f, 10, 64)
			u.coreNanos += v * 10_000_000
		}
	}
	if m, err := meminfo("MemTotal", "MemAvailable"); err == nil {
		available = m["MemAvailable"]
		u.workingSet = m["MemTotal"] - m["MemAvailable"]
		u.usageBytes = u.workingSet
	}
	return u, available
}

// GetStatsSummary returns the node's and the running pods' CPU and memory.
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	pods, err := p.samplePods(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	nu, available := nodeUsage()
	nu.nanoCores = p.rate("node", now, nu.coreNanos)
	t := metav1.NewTime(now)
	cpu := func(u usage) *statsv1alpha1.CPUStats {
		return &statsv1alpha1.CPUStats{Time: t, UsageNanoCores: ptr.To(u.nanoCores), UsageCoreNanoSeconds: ptr.To(u.coreNanos)}
	}
	memory := func(u usage, available *uint64) *statsv1alpha1.MemoryStats {
		return &statsv1alpha1.MemoryStats{Time: t, AvailableBytes: available, UsageBytes: ptr.To(u.usageBytes), WorkingSetBytes: ptr.To(u.workingSet), RSSBytes: ptr.To(u.rss)}
	}
	summary := &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName:  p.nodeName,
			StartTime: metav1.NewTime(p.started),
			CPU:       cpu(nu),
			Memory:    memory(nu, ptr.To(available)),
		},
		Pods: make([]statsv1alpha1.PodStats, 0, len(pods)),
	}
	for _, ps := range pods {
		pod := statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: ps.name, Namespace: ps.namespace, UID: ps.uid},
			StartTime: metav1.NewTime(ps.start),
			CPU:       cpu(ps.usage),
			Memory:    memory(ps.usage, nil),
		}
		for _, cs := range ps.containers {
			pod.Containers = append(pod.Containers, statsv1alpha1.ContainerStats{
				Name: cs.name, StartTime: metav1.NewTime(cs.start), CPU: cpu(cs.usage), Memory: memory(cs.usage, nil),
			})
		}
		summary.Pods = append(summary.Pods, pod)
	}
	return summary, nil
}

// GetMetricsResource returns the families of the kubelet's /metrics/resource, from
// the same figures as GetStatsSummary.
func (p *Provider) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	pods, err := p.samplePods(ctx)
	scrapeErr := err != nil
	if scrapeErr {
		pods = nil
	}
	now := time.Now()
	nu, _ := nodeUsage()
	usage := make([]providerutil.PodUsage, 0, len(pods))
	for _, ps := range pods {
		pu := providerutil.PodUsage{Namespace: ps.namespace, Name: ps.name,
			CPUCoreNanos: ps.coreNanos, WorkingSetBytes: ps.workingSet}
		for _, cs := range ps.containers {
			pu.Containers = append(pu.Containers, providerutil.ContainerUsage{Name: cs.name, Start: cs.start,
				CPUCoreNanos: cs.coreNanos, WorkingSetBytes: cs.workingSet})
		}
		usage = append(usage, pu)
	}
	node := providerutil.NodeUsage{CPUCoreNanos: nu.coreNanos, WorkingSetBytes: nu.workingSet}
	return providerutil.ResourceMetrics(now, node, usage, scrapeErr), nil
}
