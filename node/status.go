package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the node the controller means to register: built once from the
// config and the provider's ConfigureNode, then updated by what the provider
// reports through NotifyNodeStatus.

// configure builds the desired node from the config, the provider's ConfigureNode
// and the features it declares (provider.FeatureDeclarer). A server without
// status.declaredFeatures (apifeatures.NodeDeclaredFeatures, before v1.35)
// gets none, as from a kubelet of its release: it would drop them, with a
// warning at each status write, and its API server and scheduler do not ask
// a node for features.
func (c *Controller) configure(ctx context.Context) {
	n := desiredNode(c.cfg)
	if c.configurer != nil {
		c.configurer.ConfigureNode(ctx, n)
		if c.cfg.AsNode {
			// The provider cannot know the node's credential: what it set that
			// NodeRestriction refuses is left out, rather than the node never
			// registered.
			if dropped := dropRefusedLabels(n.Labels); len(dropped) > 0 {
				c.log.Warn("labels the provider set are left out: a node may not set them on itself (NodeRestriction)", "labels", dropped)
			}
		}
	}
	n.Status.Conditions = withDefaultConditions(n.Status.Conditions)
	withOperatorSettings(n, c.cfg)
	if features, ok := provider.DeclaredFeatures(c.cfg.Provider); ok && c.cfg.APIFeatures.Has(apifeatures.NodeDeclaredFeatures) {
		c.declaresFeatures = true
		n.Status.DeclaredFeatures = declaredFeatures(features, c.log)
	}
	c.setDesired(n)
}

// desiredCopy decodes the desired node; the result is the caller's.
func (c *Controller) desiredCopy() *corev1.Node {
	n := &corev1.Node{}
	var err error
	if c.cfg.Watch != nil {
		err = unpackDesired(c.desired, n)
	} else {
		err = n.Unmarshal(c.desired)
	}
	if err != nil {
		// setDesired encoded these bytes: failing to read them back is a bug.
		panic(fmt.Sprintf("node %s: decoding the desired node: %v", c.cfg.NodeName, err))
	}
	return n
}

// setDesired keeps n, encoded, as the desired node; packed if the controller
// shares a Watch with others (desiredpack.go).
func (c *Controller) setDesired(n *corev1.Node) {
	raw, err := n.Marshal()
	if err != nil {
		// A Node built from the config and the provider's reports always encodes.
		panic(fmt.Sprintf("node %s: encoding the desired node: %v", c.cfg.NodeName, err))
	}
	if c.cfg.Watch != nil {
		raw = packDesired(raw)
	}
	c.desired = raw
}

// notifyNodeStatus is the callback given to the provider's NotifyNodeStatus. It
// keeps only the newest node and wakes Run; it never blocks.
func (c *Controller) notifyNodeStatus(n *corev1.Node) {
	if n == nil {
		return
	}
	n = n.DeepCopy() // the provider may go on mutating its copy
	c.latestMu.Lock()
	c.latest = n
	c.latestMu.Unlock()
	c.poke(dueReported)
}

// takeReportedStatus folds the newest reported node, if any, into the desired status.
func (c *Controller) takeReportedStatus() {
	c.latestMu.Lock()
	n := c.latest
	c.latest = nil
	c.latestMu.Unlock()
	if n != nil {
		d := c.desiredCopy()
		d.Status = withReportedStatus(d.Status, n.Status)
		overrideCapacity(&d.Status, c.cfg.Capacity)
		c.setDesired(d)
	}
}
