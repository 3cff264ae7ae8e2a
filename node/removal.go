package node

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
)

// This file holds the rule of a node's removal: a Node marked for removal
// (`vkubelet remove-node`) is not registered again once it is deleted, nor
// its Lease created again, where a Node deleted by anyone else is registered
// again at once.

// RemovalAnnotation marks a Node that is being taken out of the cluster for
// good: `vkubelet remove-node` sets it, with the time it was asked (RFC 3339),
// when it cordons the node, before it drains and deletes it.
const RemovalAnnotation = "vkubelet.io/removal-requested"

// BeingRemoved reports whether n is marked for removal: it carries
// RemovalAnnotation and is cordoned. Uncordoning the node (kubectl uncordon)
// cancels a removal that did not finish.
func BeingRemoved(n *corev1.Node) bool {
	_, marked := n.Annotations[RemovalAnnotation]
	return marked && n.Spec.Unschedulable
}

// errRemoved is writeNode's answer when the Node is gone after it was marked
// for removal: it was removed on purpose and is not created again.
var errRemoved = errors.New("the node was removed")

// noteRemoval records whether the Node, as last seen, is marked for removal,
// and logs a change. The informer's handlers and writeNode call it.
func (c *Controller) noteRemoval(marked bool) {
	if c.removing.Swap(marked) == marked {
		return
	}
	if marked {
		c.log.Info("node marked for removal; once it is deleted it is not registered again", "annotation", RemovalAnnotation)
	} else {
		c.log.Info("node no longer marked for removal (uncordoned); it is registered again if it is deleted")
	}
}

// markRemoved stops the controller's writes for good: its Node was deleted
// after it was marked for removal. The process goes on serving the pods still
// bound to the node (those the removal is evicting) until it is stopped.
func (c *Controller) markRemoved() {
	if c.removed {
		return
	}
	c.removed = true
	c.log.Info("node removed (it was deleted after it was marked for removal); no longer writing the node or its lease")
}
