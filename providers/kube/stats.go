package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// GetStatsSummary serves the node's /stats/summary: the stats of our pods, read from
// the summaries of the target nodes that run them (nodes/<n>/proxy/stats/summary on
// the target API server) and renamed to the source pods; node CPU and memory are the
// sums over those pods. A target node whose summary cannot be read is skipped.
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	var targets []*corev1.Pod
	nodes := map[string]bool{}
	for _, o := range p.pods.GetStore().List() {
		t := o.(*corev1.Pod)
		if p.m.originKey(t) != "" && t.Spec.NodeName != "" {
			targets = append(targets, t)
			nodes[t.Spec.NodeName] = true
		}
	}
	summaries := map[string]*statsv1alpha1.Summary{}
	for n := range nodes {
		s, err := p.nodeSummary(ctx, n)
		if err != nil {
			p.log.Warn("cannot read stats of a target node", "targetNode", n, "error", err)
			continue
		}
		summaries[n] = s
	}
	return summarize(p.nodeName, metav1.NewTime(p.started), targets, summaries), nil
}

// nodeSummary reads /stats/summary of target node n through its API server.
func (p *Provider) nodeSummary(ctx context.Context, n string) (*statsv1alpha1.Summary, error) {
	if p.summaryOf != nil {
		return p.summaryOf(ctx, n)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := p.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n, "proxy/stats/summary").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("stats summary of target node %s: %w", n, err)
	}
	return &s, nil
}

// summarize builds the virtual node's summary from the target nodes' ones: the pod
// stats of targets, under the source pods' names, and their CPU and memory summed.
func summarize(nodeName string, start metav1.Time, targets []*corev1.Pod, summaries map[string]*statsv1alpha1.Summary) *statsv1alpha1.Summary {
	byRef := map[string]*corev1.Pod{}
	for _, t := range targets {
		byRef[t.Namespace+"/"+t.Name+"/"+string(t.UID)] = t
	}
	out := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: nodeName, StartTime: start}}
	var cpu, cpuTotal, wset, usage uint64
	var haveCPU, haveMem bool
	now := metav1.Now()
	for _, s := range summaries {
		for _, ps := range s.Pods {
			t, ok := byRef[ps.PodRef.Namespace+"/"+ps.PodRef.Name+"/"+ps.PodRef.UID]
			if !ok {
				continue
			}
			// ps is a copy; the summaries are ours (just decoded), so sharing pointers is fine.
			a := t.Annotations
			ps.PodRef = statsv1alpha1.PodReference{Namespace: a[AnnotationOriginNamespace], Name: a[AnnotationOriginName], UID: a[AnnotationOriginUID]}
			if c := ps.CPU; c != nil {
				haveCPU = true
				if c.UsageNanoCores != nil {
					cpu += *c.UsageNanoCores
				}
				if c.UsageCoreNanoSeconds != nil {
					cpuTotal += *c.UsageCoreNanoSeconds
				}
			}
			if m := ps.Memory; m != nil {
				haveMem = true
				if m.WorkingSetBytes != nil {
					wset += *m.WorkingSetBytes
				}
				if m.UsageBytes != nil {
					usage += *m.UsageBytes
				}
			}
			out.Pods = append(out.Pods, ps)
		}
	}
	if haveCPU {
		out.Node.CPU = &statsv1alpha1.CPUStats{Time: now, UsageNanoCores: &cpu, UsageCoreNanoSeconds: &cpuTotal}
	}
	if haveMem {
		out.Node.Memory = &statsv1alpha1.MemoryStats{Time: now, WorkingSetBytes: &wset, UsageBytes: &usage}
	}
	return out
}
