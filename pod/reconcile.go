package pod

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// reconcileProvider runs once before the workers start: it learns which pods the
// provider already runs (after a restart of this process) and queues the deletion
// of those the API no longer has.
func (c *Controller) reconcileProvider(ctx context.Context) error {
	var pods []*corev1.Pod
	backoff := 500 * time.Millisecond
	for {
		done := c.metrics.observeProviderCall("GetPods")
		var err error
		pods, err = c.provider.GetPods(ctx)
		done(err)
		if err == nil {
			break
		}
		c.log.Warn("cannot list the provider's pods; retrying", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod controller: listing provider pods: %w", ctx.Err())
		case <-c.clock.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	orphans := 0
	for _, pp := range pods {
		key := keyOf(pp)
		uid := pp.UID
		apiPod, err := c.pods.getCached(pp.Namespace, pp.Name)
		if uid == "" && err == nil {
			uid = apiPod.UID // a provider that keeps no UIDs runs the pod the API has
		}
		// What the provider runs is what it was last given, as far as the sync
		// handler's comparison with the API pod goes.
		last, cerr := podwire.Compact(pp)
		if cerr != nil {
			// Without it the first sync calls UpdatePod, which is harmless.
			c.log.Warn("cannot keep the provider's view of a pod", "pod", key, "error", cerr)
		}
		c.state.update(key, func(s *podState) {
			s.providerUID, s.lastPod, s.deleteRequested, s.stopOverdue = uid, last, false, false
			// Its volume files are unknown: the first sync resolves them, which
			// also starts watching what they come from.
			s.volumesStale = true
		})
		// A different UID under the same name is replaced by the sync handler.
		if err != nil || apiPod.DeletionTimestamp != nil {
			orphans++
			c.deleteQueue.Add(key)
		}
		if err == nil {
			c.statusQueue.Add(key)
		}
	}
	c.log.Info("reconciled with provider", "providerPods", len(pods), "toDelete", orphans)
	return nil
}
