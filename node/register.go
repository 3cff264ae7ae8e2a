package node

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// This file holds the writes of the Node itself: created when there is none (at
// start, or after someone deleted it), else patched with our labels, taints and
// status.

// syncNode writes the node, recording a failed or held-back write as owed so that
// the next heartbeat retries it.
func (c *Controller) syncNode(ctx context.Context) {
	if !c.healthy {
		c.statusDirty = true
		return
	}
	err := c.writeNode(ctx)
	if errors.Is(err, errRemoved) {
		c.markRemoved()
		return
	}
	if err != nil {
		c.log.Error("writing node failed; retrying at the next renewal", "err", err)
		c.statusDirty = true
		return
	}
	c.statusDirty = false
}

// writeNode makes the Node in the API server match c.desired: it creates the node
// if there is none, and otherwise patches in our labels, taints and providerID
// (when they differ) and our status, leaving every other field alone. A Node
// gone after it was marked for removal is not created: errRemoved.
func (c *Controller) writeNode(ctx context.Context) error {
	name := c.cfg.NodeName
	nodes := c.client.CoreV1().Nodes()
	now := c.clock.Now()
	desired := c.desiredCopy()
	cur, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if c.removing.Load() {
			return errRemoved
		}
		created, err := nodes.Create(ctx, nodeForCreate(desired, now), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %s: registering: %w", name, err)
		}
		c.nodeUID = created.UID
		c.written = writtenOf(&desired.Status)
		c.log.Info("registered node", "uid", created.UID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s: reading: %w", name, err)
	}
	c.noteRemoval(BeingRemoved(cur))
	if cur.UID != c.nodeUID {
		c.log.Info("found existing node; merging our labels, taints and status into it", "uid", cur.UID)
		c.nodeUID = cur.UID
	}
	if err := c.patchMetadata(ctx, cur, desired); err != nil {
		return err
	}
	patch, err := statusPatch(cur, c.written, &desired.Status, c.declaresFeatures, now)
	if err != nil {
		return err
	}
	if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("node %s: patching status: %w", name, err)
	}
	c.written = writtenOf(&desired.Status)
	return nil
}

// patchMetadata applies metadataPatch of desired to cur, reading the node again
// after a conflict (a taint changed by someone else between our read and our
// write).
func (c *Controller) patchMetadata(ctx context.Context, cur, desired *corev1.Node) error {
	nodes := c.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			var err error
			if cur, err = nodes.Get(ctx, c.cfg.NodeName, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		patch, err := metadataPatch(cur, desired, c.cfg.DisableTaint)
		if err != nil || patch == nil {
			return err
		}
		cur = nil
		_, err = nodes.Patch(ctx, c.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s: patching labels and taints: %w", c.cfg.NodeName, err)
	}
	return nil
}
