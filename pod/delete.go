package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/provider"
)

// deleteHandler stops a pod the API is deleting (or has deleted) and, once the
// provider confirms that it stopped (or, with RemoveUnconfirmedAfter, that
// long after its grace period), hands it to removeHandler.
func (c *Controller) deleteHandler(ctx context.Context, key string) (err error) {
	unlock := c.state.lock(key)
	defer unlock()
	ctx, span := c.startSpan(ctx, spanDelete, key)
	defer func() { endSpan(span, err) }()

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	st := c.state.get(key)
	cached, err := c.pods.getCached(ns, name)
	if apierrors.IsNotFound(err) {
		// Gone from the API (force-deleted, or deleted while we were away): the
		// provider must not keep running it.
		if err := c.deleteLastFromProvider(ctx, st.lastPod); err != nil {
			return err
		}
		c.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if cached.DeletionTimestamp == nil || c.removed.has(key, cached.UID) || c.removable.has(key, cached.UID) {
		// Not deleting, or stopped and being removed: the runs that the
		// provider's notice of the stop and the updates seen meanwhile queue
		// end here, without decoding the pod.
		return nil
	}
	p, err := cached.Decode()
	if err != nil {
		return err
	}
	if st.providerUID != "" && st.providerUID != p.UID {
		// An earlier pod of the same name still runs in the provider.
		if err := c.deleteLastFromProvider(ctx, st.lastPod); err != nil {
			return err
		}
		c.forget(key)
		st = podState{}
	}

	inProvider := st.providerUID == p.UID
	if inProvider && !st.deleteRequested {
		// Always asked, and asked again until the provider accepts, whatever
		// happened to status writes before.
		if err := c.deleteFromProvider(ctx, p); err != nil {
			return err
		}
		c.state.update(key, func(s *podState) { s.deleteRequested = true })
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonKilling, "Stopping pod in the provider (grace period %ds)", int64(provider.GracePeriod(p)/time.Second))
	}

	gone := !inProvider
	last := st.notified
	var unknown error // why the provider's word on the pod is missing
	if inProvider {
		done := c.metrics.observeProviderCall("GetPodStatus")
		status, err := c.provider.GetPodStatus(ctx, ns, name)
		done(err)
		switch {
		case errdefs.IsNotFound(err):
			gone = true
		case err == nil:
			gone, last = stopped(status), status
		default:
			unknown = err
			// Said at each poll until the grace period is over; then the
			// StopNotConfirmed Event says it once, and a provider away for
			// hours does not fill the log.
			level := slog.LevelWarn
			if st.stopOverdue {
				level = slog.LevelDebug
			}
			c.log.Log(ctx, level, "cannot read status of a deleting pod", "pod", key, "error", err)
		}
	}
	overdue := c.clock.Since(p.DeletionTimestamp.Time) // negative within the grace period
	if !gone && overdue < 0 {
		c.deleteQueue.AddAfter(key, min(-overdue, c.pollInterval))
		return nil
	}
	if !gone && !c.removeUnconfirmed(p, st, overdue, unknown) {
		// At most one copy: as the kubelet removes a deleted pod only once its
		// containers have stopped, the pod stays Terminating until the
		// provider says it stopped, and a StatefulSet starts its replacement
		// only then. Asked again at each poll.
		again := c.pollInterval
		if c.removeUnconfirmedAfter > 0 {
			again = min(again, c.removeUnconfirmedAfter-overdue)
		}
		c.deleteQueue.AddAfter(key, again)
		return nil
	}
	if len(p.Finalizers) > 0 && inProvider {
		// A finalizer keeps the pod in the API after its removal, for a
		// controller (a Job's, say) to read how it ended: as the kubelet
		// does, its status says so first. Without one the object goes, and
		// the write is saved.
		if err := c.writeStatus(ctx, p, finalStatus(p, last, metav1.NewTime(c.clock.Now())), nil); err != nil {
			return err
		}
	}
	if !gone {
		// Said once the status write above, which may fail and be retried,
		// is done.
		c.log.Warn("removing a deleted pod the provider has not confirmed stopped (--remove-unconfirmed-after)",
			"pod", key, "overdue", overdue)
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonStopNotConfirmed,
			"Removed from the API %s after its grace period without the provider's confirmation that it stopped (the node's remove-unconfirmed-after setting)",
			overdue.Round(time.Second))
	}
	c.removable.add(key, p.UID)
	c.removeQueue.Add(key)
	return nil
}

// removeHandler removes from the API a deleting pod that deleteHandler found
// stopped in the provider (or past RemoveUnconfirmedAfter), if it is still
// that pod.
func (c *Controller) removeHandler(ctx context.Context, key string) (err error) {
	unlock := c.state.lock(key)
	defer unlock()
	ctx, span := c.startSpan(ctx, spanRemove, key)
	defer func() { endSpan(span, err) }()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.pods.getCached(ns, name)
	if apierrors.IsNotFound(err) {
		return nil // gone meanwhile: deleteHandler, queued by its removal, forgets it
	}
	if err != nil {
		return err
	}
	if cached.DeletionTimestamp == nil || !c.removable.has(key, cached.UID) {
		return nil // forgotten since, or another incarnation of the name
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: cached.UID}}
	if err := c.removeFromAPI(ctx, p); err != nil {
		return err
	}
	c.forget(key)
	return nil
}

// removeUnconfirmed reports whether deleting pod p, whose grace period ended
// overdue ago and which the provider has not confirmed stopped, leaves the API
// all the same: only past the node's RemoveUnconfirmedAfter, if it has one.
// Otherwise it says once, with a Warning Event, why the pod stays Terminating:
// with unknown, the error that kept the provider's status from the node. (A
// finalizer's pod gets no more wait than another: its final status carries
// the provider's last report, and ContainerStatusUnknown for what it lacks.)
func (c *Controller) removeUnconfirmed(p *corev1.Pod, st podState, overdue time.Duration, unknown error) bool {
	bounded := c.removeUnconfirmedAfter > 0
	if bounded && overdue >= c.removeUnconfirmedAfter {
		return true
	}
	if !st.stopOverdue {
		key := keyOf(p)
		c.log.Warn("grace period over and the provider has not confirmed the pod stopped; it stays Terminating", "pod", key)
		said := "the provider has not confirmed that the pod stopped"
		if unknown != nil {
			said = fmt.Sprintf("the provider's status of the pod cannot be read (%v)", unknown)
		}
		until := "until the provider confirms it stopped (kubectl delete --force removes it from the API without that)"
		if bounded {
			until = fmt.Sprintf("until the provider confirms it stopped, or for %s (the node's remove-unconfirmed-after setting)", c.removeUnconfirmedAfter)
		}
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonStopNotConfirmed, "The grace period is over and %s: it stays Terminating %s", said, until)
		c.state.update(key, func(s *podState) { s.stopOverdue = true })
	}
	return false
}

// finalStatus is the status of deleted pod p once stopped, from last, the
// provider's last word on it (nil if none): each container not known to have
// ended shown terminated at now, and the pod in a terminal phase, as the
// kubelet ends a deleted pod: Succeeded if every container exited 0, else
// Failed.
func finalStatus(p *corev1.Pod, last *corev1.PodStatus, now metav1.Time) *corev1.PodStatus {
	var s corev1.PodStatus
	if last != nil {
		s = *last.DeepCopy()
	} else {
		s.ContainerStatuses = p.Status.ContainerStatuses
		s.InitContainerStatuses = p.Status.InitContainerStatuses
	}
	// The kubelet's reason for a container whose end it did not see.
	const reason, msg = "ContainerStatusUnknown", "the pod was deleted; the provider did not report how this container ended"
	endAt := func(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := terminatedAll(cs, reason, msg)
		for i := range out {
			if t := out[i].State.Terminated; t != nil && t.FinishedAt.IsZero() {
				t.FinishedAt = now
				if r := cs[i].State.Running; r != nil {
					t.StartedAt = r.StartedAt
				}
			}
		}
		return out
	}
	s.ContainerStatuses = endAt(s.ContainerStatuses)
	s.InitContainerStatuses = endAt(s.InitContainerStatuses)
	if !isTerminal(&s) {
		s.Phase = corev1.PodSucceeded
		for _, cs := range s.ContainerStatuses {
			if t := cs.State.Terminated; t == nil || t.ExitCode != 0 {
				s.Phase = corev1.PodFailed
			}
		}
	}
	return &s
}

// stopped reports whether the provider says nothing of the pod runs any more: the
// pod is terminal, or every app container has terminated and no init container runs.
// A waiting container may still start, so it does not count as stopped.
func stopped(s *corev1.PodStatus) bool {
	if isTerminal(s) {
		return true
	}
	if len(s.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range s.InitContainerStatuses {
		if cs.State.Running != nil {
			return false
		}
	}
	for _, cs := range s.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// deleteLastFromProvider stops, by deleteFromProvider, the pod last seen under a
// key: the API has no pod of that incarnation any more.
func (c *Controller) deleteLastFromProvider(ctx context.Context, last *podwire.Pod) error {
	if last == nil {
		return nil
	}
	p, err := last.Decode()
	if err != nil {
		return err
	}
	return c.deleteFromProvider(ctx, p)
}

// deleteFromProvider stops p in the provider; a provider that no longer has it has
// done what was asked.
func (c *Controller) deleteFromProvider(ctx context.Context, p *corev1.Pod) error {
	if p == nil {
		return nil
	}
	err := c.callProvider(ctx, p, "DeletePod", func(ctx context.Context) error {
		err := c.provider.DeletePod(ctx, p.DeepCopy())
		if errdefs.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil && errors.Is(err, context.Canceled) {
		return ctx.Err()
	}
	return err
}

// removeFromAPI deletes the pod object for good, only if it is still the same pod.
func (c *Controller) removeFromAPI(ctx context.Context, p *corev1.Pod) error {
	// Recorded before the request, so that the informer's report of the pod
	// gone, which clears it, cannot come first.
	c.removed.add(keyOf(p), p.UID)
	done := c.metrics.observeAPIDelete()
	err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &p.UID},
	})
	done(err)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	c.removed.forget(keyOf(p))
	return fmt.Errorf("removing %s from the API: %w", keyOf(p), err)
}

// removedPods are pods removed from the API whose removal the informer has not
// reported yet, by key.
type removedPods struct {
	mu   sync.Mutex
	uids map[string]types.UID
}

func (r *removedPods) add(key string, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uids == nil {
		r.uids = map[string]types.UID{}
	}
	r.uids[key] = uid
}

func (r *removedPods) has(key string, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.uids[key]
	return ok && u == uid
}

func (r *removedPods) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.uids, key)
	if len(r.uids) == 0 {
		r.uids = nil // Go never shrinks a map: a burst of deletions is not kept
	}
}

// forget drops what the controller and the resolver keep about key.
func (c *Controller) forget(key string) {
	c.state.forget(key)
	c.removable.forget(key)
	c.resolver.Release(key)
}
