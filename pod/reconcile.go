package pod

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vkubelet/vkubelet/internal/clockwait"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// listBackoff paces the retries of reconcileProvider's listing of the provider's
// pods: from 500ms, doubling, up to 30s; each wait is up to 20% longer at random,
// so that the nodes of one provider that is away do not all ask it again at once.
var listBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// reconcileProvider runs once before the workers start: it learns which pods the
// provider already runs (after a restart of this process) and queues the deletion
// of those the API no longer has. It lists them until the provider answers or ctx
// ends, with back-off (listBackoff) on the controller's clock.
func (c *Controller) reconcileProvider(ctx context.Context) error {
	var pods []*corev1.Pod
	err := clockwait.Until(ctx, c.clock, listBackoff, func(ctx context.Context) (bool, error) {
		done := c.metrics.observeProviderCall("GetPods")
		var err error
		pods, err = c.provider.GetPods(ctx)
		done(err)
		if err != nil {
			c.log.Warn("cannot list the provider's pods; retrying", "error", err)
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("pod controller: listing provider pods: %w", err)
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
