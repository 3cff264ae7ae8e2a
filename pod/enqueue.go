package pod

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// handlePod routes an added or updated pod to the right queue.
func (c *Controller) handlePod(obj any) {
	p, ok := obj.(*podwire.Pod)
	if !ok {
		return
	}
	key := p.Key()
	if p.DeletionTimestamp != nil {
		c.deleteQueue.Add(key)
		return
	}
	c.syncQueue.Add(key)
}

// handleUpdatedPod routes an updated pod like a new one and, when its status
// changed, has the status checked against the provider's: a status changed by
// someone else — the node-lifecycle controller marks the pods of a node it cannot
// reach not Ready — is put right as the kubelet's status manager would, and one
// we wrote costs a comparison.
func (c *Controller) handleUpdatedPod(oldObj, newObj any) {
	c.handlePod(newObj)
	old, ok1 := oldObj.(*podwire.Pod)
	p, ok2 := newObj.(*podwire.Pod)
	if ok1 && ok2 && old.StatusHash() != p.StatusHash() && !p.Terminal() && p.DeletionTimestamp == nil && !c.ownStatus(p) {
		c.statusQueue.Add(p.Key())
	}
}

// ownStatus reports whether p's status is the one the controller wrote last,
// coming back through the watch: there is nothing to check (statusEcho).
func (c *Controller) ownStatus(p *podwire.Pod) bool {
	own := false
	c.state.echo(p.Key(), func(e *statusEcho) { own = e.isEcho(p.StatusHash()) })
	return own
}

// handleDeletedPod reacts to a pod gone from the API: the provider must stop it.
func (c *Controller) handleDeletedPod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The informer may not know the last state (or any object at all): the
		// key is enough.
		c.removed.forget(t.Key)
		c.deleteQueue.Add(t.Key)
		return
	}
	p, ok := obj.(*podwire.Pod)
	if !ok {
		return
	}
	c.removed.forget(p.Key())
	c.deleteQueue.Add(p.Key())
}

// handleReferenceChange is the resolver's callback: an object the pod references
// changed (or appeared), or one of its tokens is due for refresh. A pod waiting for
// it is synced again; a running pod gets its volumes refreshed.
func (c *Controller) handleReferenceChange(key string) {
	c.state.updateIfExists(key, func(s *podState) { s.volumesStale = true })
	c.syncQueue.Add(key)
}

// handleProviderPod is the PodNotifier callback. It must not block: it records the
// status and queues work.
func (c *Controller) handleProviderPod(p *corev1.Pod) {
	if p == nil {
		return
	}
	key := keyOf(p)
	// Only pods the controller handed to the provider (or found there at start),
	// or is handing to it, are tracked; a late notice about a pod already
	// forgotten is dropped.
	c.state.notify(key, p.UID, p.Status.DeepCopy())
	c.statusQueue.Add(key)
	// A deleting pod waits for the provider to confirm it stopped: this may be it.
	if apiPod, err := c.pods.getCached(p.Namespace, p.Name); err == nil && apiPod.DeletionTimestamp != nil {
		c.deleteQueue.Add(key)
	}
}

// pollStatuses queues every pod for a status read, for providers without a notifier.
func (c *Controller) pollStatuses(ctx context.Context) {
	t := c.clock.NewTicker(c.pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		for _, p := range c.pods.list() {
			if !p.Terminal() || p.DeletionTimestamp != nil {
				c.statusQueue.Add(p.Key())
			}
		}
	}
}
