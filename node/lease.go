package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file holds the heartbeat: each RenewInterval the provider is pinged and,
// while it answers, the node's Lease in kube-node-lease is renewed; LeaseCurrent
// reports whether the cluster still sees the node alive.

// heartbeat pings the provider and, if it answers, writes any owed node status and
// renews the lease. While Ping fails, nothing is written: the lease expires and the
// node-lifecycle controller marks the node Unknown. On recovery the node is written
// at once with Ready=True and fresh times, then the lease is renewed.
func (c *Controller) heartbeat(ctx context.Context) {
	if c.removed {
		return
	}
	if err := c.ping(ctx); err != nil {
		if c.healthy {
			c.log.Warn("provider ping failed; not renewing the node lease until it recovers", "err", err)
		} else {
			c.log.Debug("provider ping still failing", "err", err)
		}
		c.healthy = false
		return
	}
	if !c.healthy {
		c.log.Info("provider ping recovered; renewing the node lease")
		c.healthy = true
		c.statusDirty = true
	}
	if c.statusDirty {
		c.syncNode(ctx)
		if c.removed {
			return
		}
	}
	if c.renewLease(ctx) {
		c.readyOnce.Do(func() {
			close(c.ready)
			if c.cfg.OnReady != nil {
				c.cfg.OnReady()
			}
		})
	}
}

func (c *Controller) ping(ctx context.Context) error {
	if c.nodeProvider == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PingTimeout)
	defer cancel()
	return c.nodeProvider.Ping(ctx)
}

// renewLease writes the lease, renewed now and owned by the current Node. A write
// from a stale copy (conflict, or the lease was garbage-collected with an earlier
// Node) is retried once from a fresh read. It reports success; failures are logged.
func (c *Controller) renewLease(ctx context.Context) bool {
	err := c.tryRenewLease(ctx)
	if err != nil && c.lease != nil {
		c.lease = nil
		err = c.tryRenewLease(ctx)
	}
	if errors.Is(err, errRemoved) {
		c.log.Info("node lease not created again: the node is being removed")
		return false
	}
	if err != nil {
		c.log.Error("renewing node lease failed", "err", err)
		return false
	}
	c.renewedAt.Store(c.clock.Now().UnixNano())
	return true
}

// LeaseCurrent returns nil while the node's lease was renewed within its duration,
// that is while the cluster sees the node alive; else why not. It serves the
// agent's /readyz.
func (c *Controller) LeaseCurrent() error {
	at := c.renewedAt.Load()
	if at == 0 {
		return fmt.Errorf("node %s: lease not written yet", c.cfg.NodeName)
	}
	if age := c.clock.Since(time.Unix(0, at)); age > c.cfg.LeaseDuration {
		return fmt.Errorf("node %s: lease last renewed %s ago, longer than its duration %s", c.cfg.NodeName, age.Round(time.Second), c.cfg.LeaseDuration)
	}
	return nil
}

func (c *Controller) tryRenewLease(ctx context.Context) error {
	name := c.cfg.NodeName
	leases := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	base := c.leaseCopy()
	if base == nil {
		got, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && c.removing.Load() {
			// Deleted by the removal, the Node's deletion not seen yet.
			return fmt.Errorf("node %s: lease deleted while the node is marked for removal: %w", name, errRemoved)
		}
		if apierrors.IsNotFound(err) {
			created, err := leases.Create(ctx, renewedLease(nil, name, c.nodeUID, c.cfg.LeaseDuration, c.clock.Now()), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("node %s: creating lease: %w", name, err)
			}
			c.keepLease(created)
			return nil
		}
		if err != nil {
			return fmt.Errorf("node %s: reading lease: %w", name, err)
		}
		base = got
	}
	updated, err := leases.Update(ctx, renewedLease(base, name, c.nodeUID, c.cfg.LeaseDuration, c.clock.Now()), metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: renewing lease: %w", name, err)
	}
	c.keepLease(updated)
	return nil
}

// keepLease keeps l, as written, for the next renewal: without its managed
// fields (an update that carries none leaves the server's as they are), and
// protobuf-encoded, as the desired node is (setDesired): it is read once a
// RenewInterval, and a decoded Lease is some twenty allocations that each of a
// NodeSet's thousand nodes would hold meanwhile. A lease that does not encode
// is not kept: the next renewal reads it first.
func (c *Controller) keepLease(l *coordinationv1.Lease) {
	l.ManagedFields = nil
	raw, err := l.Marshal()
	if err != nil {
		c.log.Warn("keeping the node lease", "err", err)
		raw = nil
	}
	c.lease = raw
}

// leaseCopy returns the lease as last written, nil if none is kept.
func (c *Controller) leaseCopy() *coordinationv1.Lease {
	if c.lease == nil {
		return nil
	}
	l := &coordinationv1.Lease{}
	if err := l.Unmarshal(c.lease); err != nil {
		// keepLease encoded these bytes: failing to read them back is a bug.
		panic(fmt.Sprintf("node %s: decoding the kept lease: %v", c.cfg.NodeName, err))
	}
	return l
}
