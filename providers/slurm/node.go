package slurm

import (
	"context"
	"errors"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ping asks slurmctld whether it is up: while it is not, the node is NotReady.
func (p *Provider) Ping(ctx context.Context) error {
	return p.cli.ping(ctx)
}

// NotifyNodeStatus re-reads the partition's capacity every NodeRefresh and passes
// on a node whose capacity changed.
func (p *Provider) NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node)) {
	go func() {
		t := time.NewTicker(p.cfg.NodeRefresh.Duration)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			before := p.currentCapacity()
			if err := p.refreshCapacity(ctx); err != nil {
				p.log.Warn("reading the partition's capacity", "error", err)
				continue
			}
			if after := p.currentCapacity(); !reflect.DeepEqual(before, after) {
				n := &corev1.Node{}
				n.Status.Capacity, n.Status.Allocatable = after, after.DeepCopy()
				notify(n)
			}
		}
	}()
}

func (p *Provider) currentCapacity() corev1.ResourceList {
	p.capMu.Lock()
	defer p.capMu.Unlock()
	return p.capacity.DeepCopy()
}

// refreshCapacity sums the CPUs, memory and GPUs of the partition's nodes.
func (p *Provider) refreshCapacity(ctx context.Context) error {
	nodes, err := p.cli.nodes(ctx, p.cfg.Partition)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return errors.New("sinfo lists no node in the partition")
	}
	rl := capacityOf(nodes, p.cfg.MaxPods)
	p.capMu.Lock()
	p.capacity = rl
	p.capMu.Unlock()
	return nil
}

// ConfigureNode sets the node's capacity from sinfo (read now, if it was not yet).
func (p *Provider) ConfigureNode(ctx context.Context, n *corev1.Node) {
	if p.currentCapacity() == nil {
		if err := p.refreshCapacity(ctx); err != nil {
			p.log.Warn("reading the partition's capacity", "error", err)
			return
		}
	}
	rl := p.currentCapacity()
	n.Status.Capacity, n.Status.Allocatable = rl, rl.DeepCopy()
}
