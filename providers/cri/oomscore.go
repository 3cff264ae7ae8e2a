package cri

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// This file holds the OOM score adjustment of the containers' processes
// (oom_score_adj), which the kubelet sets from the pod's QoS class so that under
// memory pressure the kernel kills best-effort containers first and guaranteed
// ones last, and which the CRI runtime leaves to it.

const (
	// guaranteedOOMScoreAdj is that of guaranteed pods and node-critical ones.
	guaranteedOOMScoreAdj = -997
	// bestEffortOOMScoreAdj is that of best-effort pods.
	bestEffortOOMScoreAdj = 1000
)

// oomScoreAdj is the oom_score_adj of container c of the pod, as the kubelet
// works it out: fixed for guaranteed (and system-node-critical) and
// best-effort pods; for burstable ones, the share of the node's memory the
// container requests, turned into a score between those, with a sidecar never
// more likely to be killed than the pod's app container requesting the least.
func (p *Provider) oomScoreAdj(pod *corev1.Pod, c *corev1.Container) int64 {
	if pod.Spec.PriorityClassName == "system-node-critical" {
		return guaranteedOOMScoreAdj
	}
	switch qosClass(pod) {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return bestEffortOOMScoreAdj
	}
	capacity := p.memoryCapacity()
	if capacity <= 0 {
		return bestEffortOOMScoreAdj - 1
	}
	// Memory the pod requests beyond its containers' (pod-level resources)
	// is shared among them.
	var extra int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		if podMem := pod.Spec.Resources.Requests.Memory().Value(); podMem > 0 {
			containers := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
			spare := podMem - containers.Memory().Value()
			extra = max(spare, 0) / int64(len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
		}
	}
	score := func(request int64) int64 { return 1000 - 1000*(request+extra)/capacity }
	adj := score(c.Resources.Requests.Memory().Value())
	if isSidecar(c) && len(pod.Spec.Containers) > 0 && isInitContainer(pod, c.Name) {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for _, app := range pod.Spec.Containers[1:] {
			least = min(least, app.Resources.Requests.Memory().Value())
		}
		adj = min(adj, score(least))
	}
	// Above any guaranteed container, below any best-effort one.
	return min(max(adj, 1000+guaranteedOOMScoreAdj), bestEffortOOMScoreAdj-1)
}

// memoryCapacity is the node's memory in bytes, as its status says, else as
// the host has it; 0 if unknown.
func (p *Provider) memoryCapacity() int64 {
	p.mu.Lock()
	node := p.node
	p.mu.Unlock()
	if node != nil {
		if q, ok := node.Status.Capacity[corev1.ResourceMemory]; ok {
			return q.Value()
		}
	}
	total, err := memTotal()
	if err != nil {
		return 0
	}
	return int64(total)
}

func isInitContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// qosClass is the pod's QoS class as the API server set it in its status, else
// worked out from its containers' requests and limits (a pod with pod-level
// resources always has it from the API server).
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	set, guaranteed := false, true
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			set = set || hasReq || hasLim
			if !hasLim || (hasReq && !req.Equal(lim)) {
				guaranteed = false
			}
		}
	}
	switch {
	case !set:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}
