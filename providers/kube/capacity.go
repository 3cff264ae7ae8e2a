package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// capacityState is the capacity last reported and where to report changes.
type capacityState struct {
	changed chan struct{} // 1 slot: the target's nodes or pods changed
	mu      sync.Mutex
	notify  func(*corev1.Node)
	last    corev1.ResourceList
}

// freeCapacity is what the virtual node offers: the allocatable resources of the
// target's Ready, schedulable nodes selected by counted minus the requests of the non-terminal pods on them that
// are not ours (offloadedBy), capped by limit. Pure: tests drive it with objects.
func freeCapacity(nodes []*corev1.Node, pods []*corev1.Pod, counted labels.Selector, offloadedBy string, limit corev1.ResourceList) corev1.ResourceList {
	total := corev1.ResourceList{}
	eligible := map[string]bool{}
	for _, n := range nodes {
		if !eligibleNode(n, counted) {
			continue
		}
		eligible[n.Name] = true
		for r, q := range n.Status.Allocatable {
			sum := total[r]
			sum.Add(q)
			total[r] = sum
		}
	}
	for _, p := range pods {
		if !eligible[p.Spec.NodeName] || p.Labels[LabelOffloadedBy] == offloadedBy ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for r, q := range podRequests(p) {
			if sum, ok := total[r]; ok {
				sum.Sub(q)
				total[r] = sum
			}
		}
		if sum, ok := total[corev1.ResourcePods]; ok {
			sum.Sub(resource.MustParse("1"))
			total[corev1.ResourcePods] = sum
		}
	}
	for r, q := range total {
		if q.Sign() < 0 {
			total[r] = *resource.NewQuantity(0, q.Format)
		}
		if l, ok := limit[r]; ok && l.Cmp(total[r]) < 0 {
			total[r] = l.DeepCopy()
		}
	}
	return total
}

// eligibleNode: Ready, schedulable and selected (by default: not a virtual node).
func eligibleNode(n *corev1.Node, counted labels.Selector) bool {
	if n.Spec.Unschedulable || !counted.Matches(labels.Set(n.Labels)) {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRequests is what the scheduler accounts for p: the larger of the sum of its
// containers' requests and each init container's, plus the pod overhead.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	reqs := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for r, q := range c.Resources.Requests {
			sum := reqs[r]
			sum.Add(q)
			reqs[r] = sum
		}
	}
	for _, c := range p.Spec.InitContainers {
		for r, q := range c.Resources.Requests {
			if cur, ok := reqs[r]; !ok || q.Cmp(cur) > 0 {
				reqs[r] = q.DeepCopy()
			}
		}
	}
	for r, q := range p.Spec.Overhead {
		sum := reqs[r]
		sum.Add(q)
		reqs[r] = sum
	}
	return reqs
}

// currentCapacity computes the capacity from the informers' caches.
func (p *Provider) currentCapacity() corev1.ResourceList {
	var nodes []*corev1.Node
	for _, o := range p.nodes.GetStore().List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	var pods []*corev1.Pod
	for _, o := range p.allPods.GetStore().List() {
		pods = append(pods, o.(*corev1.Pod))
	}
	return freeCapacity(nodes, pods, p.cfg.countNodes, p.m.offloadedBy, p.cfg.capacity)
}

func (p *Provider) capacityChanged() {
	select {
	case p.capacity.changed <- struct{}{}:
	default:
	}
}

// runCapacity reports the capacity whenever it changes, at most every 500ms.
func (p *Provider) runCapacity(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.capacity.changed:
		}
		if !p.nodes.HasSynced() || !p.allPods.HasSynced() {
			continue // the first full list comes with its own events
		}
		cur := p.currentCapacity()
		p.capacity.mu.Lock()
		notify := p.capacity.notify
		same := equality.Semantic.DeepEqual(cur, p.capacity.last)
		if notify != nil && !same {
			p.capacity.last = cur
		}
		p.capacity.mu.Unlock()
		if notify != nil && !same {
			n := &corev1.Node{Status: corev1.NodeStatus{Capacity: cur, Allocatable: cur.DeepCopy()}}
			notify(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ConfigureNode sets capacity and allocatable from the target, waiting a little for
// the first lists.
func (p *Provider) ConfigureNode(ctx context.Context, node *corev1.Node) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if cache.WaitForCacheSync(wctx.Done(), p.nodes.HasSynced, p.allPods.HasSynced) {
		cur := p.currentCapacity()
		node.Status.Capacity, node.Status.Allocatable = cur, cur.DeepCopy()
		p.capacity.mu.Lock()
		p.capacity.last = cur
		p.capacity.mu.Unlock()
	} else {
		p.log.Warn("target cluster not listed yet; the node starts without capacity")
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Spec.ProviderID = "kube://" + p.cfg.ClusterID + "/" + p.nodeName
}

// NotifyNodeStatus registers the callback for capacity changes.
func (p *Provider) NotifyNodeStatus(_ context.Context, notify func(*corev1.Node)) {
	p.capacity.mu.Lock()
	p.capacity.notify = notify
	p.capacity.mu.Unlock()
	p.capacityChanged()
}

// Ping asks the target API server's /readyz.
func (p *Provider) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.pingTimeout)
	defer cancel()
	if p.restConfig == nil {
		return nil // a client given WithClient (tests) has no server to ask
	}
	body, err := p.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("target cluster /readyz: %w (%s)", err, body)
	}
	return nil
}
