package pod

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/trace"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
	"github.com/vkubelet/vkubelet/provider"
)

// statusHandler brings the API's status of a pod up to the provider's.
func (c *Controller) statusHandler(ctx context.Context, key string) (err error) {
	unlock := c.state.lock(key)
	defer unlock()

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	// The cache may not show our last write yet: its echo can be on its way
	// through the watch, and a write is often followed at once by the next
	// check (a pod's Pending then Running).
	c.state.echo(key, (*statusEcho).checkStarts)
	cached, err := c.pods.getCached(ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.state.echo(key, func(e *statusEcho) { e.cacheRead(cached.statusHash) })
	st := c.state.get(key)
	if st.providerUID != cached.UID || (cached.terminal && !stoppedByNode(st, cached)) {
		return nil // not (yet) in the provider, or finished for good
	}
	// The status and the few metadata fields below are all this handler reads.
	p, err := cached.withStatus()
	if err != nil {
		return err
	}
	if st.lastPod != nil && st.lastPod != cached {
		// A newer spec may not have reached the provider yet: the status
		// observes the generation the provider was given (unknown, 0, for a
		// pod found in the provider at start whose copy has none).
		if gen, err := st.lastPod.generation(); err == nil && gen > 0 {
			p.Generation = gen
		}
	}
	ctx, span := c.startSpan(continuedFrom(ctx, st.startTrace), spanStatus, key)
	defer func() { endSpan(span, err) }()
	if st.startTrace != nil {
		c.state.updateIfExists(key, func(s *podState) { s.startTrace = nil })
	}
	status := st.notified
	if status == nil {
		done := c.metrics.observeProviderCall("GetPodStatus")
		status, err = c.provider.GetPodStatus(ctx, ns, name)
		done(err)
		if errdefs.IsNotFound(err) {
			if p.DeletionTimestamp != nil {
				c.deleteQueue.Add(key)
				return nil
			}
			if stoppedByNode(st, cached) {
				// Stopped and then forgotten by the provider, as asked: its
				// containers' last states will not come.
				c.state.update(key, func(s *podState) { s.providerUID, s.deleteRequested = "", false })
				return c.writeStatus(ctx, p, &corev1.PodStatus{ContainerStatuses: terminatedAll(p.Status.ContainerStatuses,
					p.Status.Reason, "the provider stopped the pod and no longer reports it")}, nil)
			}
			// The provider lost the pod: the sync handler starts it again or, if
			// its restart policy forbids that, marks it failed.
			c.log.Warn("provider no longer has the pod", "pod", key)
			c.state.update(key, func(s *podState) { s.providerUID, s.deleteRequested = "", false })
			c.syncQueue.Add(key)
			return nil
		}
		if err != nil {
			return fmt.Errorf("GetPodStatus %s: %w", key, err)
		}
	}
	if status, err = c.completed(cached, &p.Status, status); err != nil {
		return err
	}
	if left, ok := deadlineLeft(p, status, c.clock.Now()); ok {
		if left <= 0 {
			return c.stopAtDeadline(ctx, key, st, cached, status)
		}
		c.statusQueue.AddAfter(key, left) // an earlier check of the same pod is kept
	}
	// The resources in effect, for a provider that resizes in place: as the
	// API's status says them (p has no containers: withStatus), unless it does
	// not yet or the spec changed since.
	var running *corev1.PodSpec
	if c.resizesInPlace() {
		from := cached
		if st.lastPod != nil && st.lastPod.specHash != cached.specHash {
			// A spec change the sync has yet to hand over, a resize perhaps:
			// the status tells the resources the provider runs.
			from = st.lastPod
		}
		if from != cached || !reportsResources(&p.Status) {
			if running, err = from.resourcesSpec(); err != nil {
				return err
			}
		}
	}
	if err := c.writeStatus(ctx, p, status, running); err != nil {
		return err
	}
	if stoppedByNode(st, cached) && c.notifier == nil && !stopped(status) {
		c.statusQueue.AddAfter(key, c.pollInterval) // terminal pods are not polled
	}
	if st.notified != nil {
		// Written: from now on GetPodStatus answers for the provider, so the
		// notified copy is not kept for the pod's whole life.
		c.state.updateIfExists(key, func(s *podState) {
			if s.notified == st.notified {
				s.notified = nil
			}
		})
	}
	return nil
}

// writeStatus is the one writer of a pod's status to the API server: every
// status the node reports for a pod, the provider's or its own (a resolution
// failure, a failed provider call, a lost pod, a deadline, ephemeral containers
// it cannot run), goes through it. It merges fromProvider into p's status as
// the kubelet's rules have it (mergeStatus, finishedNotReady) and, if that
// changes anything, sends a strategic-merge patch of the status subresource,
// which keeps the fields others write. It records the write for the echo
// suppression (statusEcho) and has the pod checked again when an update seen
// during the write may not have been its echo.
//
// running, for a provider that resizes in place, is the spec whose containers'
// resources the provider runs, which the status reports; only a status check
// knows them (p's spec may hold a resize the provider has yet to make, or has
// just failed to): everyone else passes nil, and the resources in effect stay
// as the API has them.
func (c *Controller) writeStatus(ctx context.Context, p *corev1.Pod, fromProvider *corev1.PodStatus, running *corev1.PodSpec) error {
	key := keyOf(p)
	of := specOf(p)
	of.resize, of.running = c.state.resizeOf(key), running
	desired := mergeStatus(p.Status, fromProvider, of)
	finishedNotReady(&p.Status, &desired, metav1.NewTime(c.clock.Now()))
	patch, err := statusPatch(p.UID, &p.Status, &desired)
	if err != nil || patch == nil {
		return err
	}
	done := c.metrics.observeStatusWrite()
	pctx, span := c.startSpan(ctx, spanPatch, key, trace.WithSpanKind(trace.SpanKindClient))
	c.state.echo(key, (*statusEcho).writeStarts)
	written, err := c.patchStatus(pctx, p.Namespace, p.Name, patch)
	endSpan(span, err)
	done(err)
	// The write comes back through the watch: knowing its status there, the
	// update handler does not check it against the provider again.
	var during echoWrite
	c.state.echo(key, func(e *statusEcho) { during = e.writeEnds(written) })
	// The echo may have come during the write (taken as ours meanwhile): the
	// cache shows the write, and no echo is pending.
	cur, cerr := c.pods.getCached(p.Namespace, p.Name)
	shown := cerr == nil && written != 0 && cur.statusHash == written
	if shown {
		c.state.echo(key, func(e *statusEcho) { e.shown(written) })
	}
	if during.recheck(err != nil, shown) {
		c.statusQueue.Add(key)
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the pod is gone or was replaced; its successor gets its own sync
	}
	if err != nil {
		return fmt.Errorf("patching status of %s: %w", key, err)
	}
	return nil
}

// patchStatus sends a strategic-merge patch to the status subresource of a pod.
// The API server answers with the whole pod, which is not decoded (the informer
// brings the pod anyway, and decoding it took a tenth of the node's CPU per pod
// start, vkubelet bench), nor copied: read into a reused buffer
// (internal/wire/apiwire), its encoding gives the fingerprint of the status stored
// (cachedPod's statusHash), which patchStatus returns; 0 if not known.
func (c *Controller) patchStatus(ctx context.Context, namespace, name string, patch []byte) (uint64, error) {
	if c.rawPods != nil {
		answer, err := c.rawPods.rest.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").
			Name(name).SubResource("status").Body(patch).Stream(ctx)
		if err != nil {
			return 0, err
		}
		var status uint64
		err = apiwire.Read(answer, func(data []byte) error {
			if kind, raw, ok := apiwire.Envelope(data); ok && string(kind) == "Pod" {
				status = statusFingerprint(raw)
			}
			return nil
		})
		return status, err
	}
	// client-go's fake clientsets have no REST client.
	_, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return 0, err
}

// deleteHandler stops a pod the API is deleting (or has deleted) and, once the
// provider confirms or the grace period is over, removes it from the API.
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
	p, _, err := c.pods.get(ns, name)
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
	if p.DeletionTimestamp == nil || c.removed.has(key, p.UID) {
		return nil
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
	if inProvider {
		done := c.metrics.observeProviderCall("GetPodStatus")
		status, err := c.provider.GetPodStatus(ctx, ns, name)
		done(err)
		switch {
		case errdefs.IsNotFound(err):
			gone = true
		case err == nil:
			gone = stopped(status)
		default:
			c.log.Warn("cannot read status of a deleting pod", "pod", key, "error", err)
		}
	}
	remaining := p.DeletionTimestamp.Time.Sub(c.clock.Now())
	if !gone && remaining > 0 {
		c.deleteQueue.AddAfter(key, min(remaining, c.pollInterval))
		return nil
	}
	if !gone {
		c.log.Info("grace period over before the provider confirmed the pod stopped; removing it", "pod", key)
	}
	if err := c.removeFromAPI(ctx, p); err != nil {
		return err
	}
	c.forget(key)
	return nil
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
}

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
		last, cerr := compact(pp)
		if cerr != nil {
			// Without it the first sync calls UpdatePod, which is harmless.
			c.log.Warn("cannot keep the provider's view of a pod", "pod", key, "error", cerr)
		}
		c.state.update(key, func(s *podState) {
			s.providerUID, s.lastPod, s.deleteRequested = uid, last, false
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
