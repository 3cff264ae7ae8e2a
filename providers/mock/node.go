package mock

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Ping returns the error set by SetPingError (nil by default), or the context's error
// if it has ended.
func (p *Provider) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pingErr
}

// SetPingError makes Ping return err from now on (nil: healthy again). It is meant
// for tests of the node controller's lease and Ready handling.
func (p *Provider) SetPingError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pingErr = err
}

// NotifyNodeStatus keeps notify, which SetCapacity calls with the updated node. The
// mock's node never changes by itself.
func (p *Provider) NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifyNode = notify
}

// ConfigureNode sets the node's capacity and allocatable (cpu, memory, pods and the
// extended resources of the Config), its spec.providerID and, when configured, its
// topology.kubernetes.io/zone and /region labels. It leaves nodeInfo, conditions and
// addresses to the caller; the node's InternalIP, if any, becomes the hostIP of the
// pods created from then on, unless WithHostIP was given.
func (p *Provider) ConfigureNode(ctx context.Context, node *corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.configureLocked(node)
	if !p.hostIPFixed {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				p.hostIP = a.Address
				break
			}
		}
	}
}

func (p *Provider) configureLocked(node *corev1.Node) {
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	for name, q := range p.capacityLocked() {
		node.Status.Capacity[name] = q.DeepCopy()
		node.Status.Allocatable[name] = q.DeepCopy()
	}
	node.Spec.ProviderID = p.cfg.ProviderID
	if p.cfg.Zone != "" || p.cfg.Region != "" {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		if p.cfg.Zone != "" {
			node.Labels[corev1.LabelTopologyZone] = p.cfg.Zone
		}
		if p.cfg.Region != "" {
			node.Labels[corev1.LabelTopologyRegion] = p.cfg.Region
		}
	}
}

// SetCapacity sets the quantities of the given resources in the node's capacity and
// allocatable (others are kept) and calls the NotifyNodeStatus callback, if any, with
// the updated node. It is meant for tests of the node controller.
func (p *Provider) SetCapacity(resources corev1.ResourceList) {
	p.mu.Lock()
	if p.capacity == nil {
		p.capacity = p.capacityLocked()
	}
	for name, q := range resources {
		p.capacity[name] = q.DeepCopy()
	}
	// The node controller takes a reported node's status: a node with what the
	// mock configures is enough, and the mock keeps no copy of the whole Node.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.nodeName}}
	p.configureLocked(node)
	notify := p.notifyNode
	p.mu.Unlock()
	if notify != nil {
		notify(node)
	}
}

// capacityLocked returns the node's capacity and allocatable: the config's,
// parsed again at each call (ConfigureNode, SetCapacity), unless SetCapacity changed
// it. A parsed list is some 700 bytes of map that each of a NodeSet's thousand
// mock nodes would otherwise keep for good.
func (p *Provider) capacityLocked() corev1.ResourceList {
	if p.capacity != nil {
		return p.capacity
	}
	c, err := p.cfg.validate()
	if err != nil {
		// New validated the same config.
		panic(fmt.Sprintf("mock: node %s: capacity: %v", p.nodeName, err))
	}
	return c
}

// memoryCapacityLocked returns the node's memory capacity in bytes, 0 if it has none.
func (p *Provider) memoryCapacityLocked() uint64 {
	q, ok := p.capacity[corev1.ResourceMemory]
	if p.capacity == nil {
		var err error
		q, err = resource.ParseQuantity(p.cfg.Memory) // validated by New
		ok = err == nil
	}
	if !ok || q.Sign() <= 0 {
		return 0
	}
	return uint64(q.Value())
}
