package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"go.opentelemetry.io/otel/trace"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
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
	c.state.echo(key, func(e *statusEcho) { e.cacheRead(cached.StatusHash()) })
	st := c.state.get(key)
	if st.providerUID != cached.UID || (cached.Terminal() && !stoppedByNode(st, cached)) {
		return nil // not (yet) in the provider, or finished for good
	}
	if c.removable.has(key, cached.UID) {
		return nil // stopped (or past RemoveUnconfirmedAfter) and on its way out of the API
	}
	// The status and the few metadata fields below are all this handler reads.
	p, err := cached.WithStatus()
	if err != nil {
		return err
	}
	if st.lastPod != nil && st.lastPod != cached {
		// A newer spec may not have reached the provider yet: the status
		// observes the generation the provider was given (unknown, 0, for a
		// pod found in the provider at start whose copy has none).
		if gen, err := st.lastPod.Generation(); err == nil && gen > 0 {
			p.Generation = gen
		}
	}
	ctx, span := c.startSpan(continuedFrom(ctx, c.state.takeStartTrace(key)), spanStatus, key)
	defer func() { endSpan(span, err) }()
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
				c.state.update(key, func(s *podState) { s.providerUID, s.deleteRequested, s.stopOverdue = "", false, false })
				return c.writeStatus(ctx, p, &corev1.PodStatus{ContainerStatuses: terminatedAll(p.Status.ContainerStatuses,
					p.Status.Reason, "the provider stopped the pod and no longer reports it")}, nil)
			}
			// The provider lost the pod: the sync handler starts it again or, if
			// its restart policy forbids that, marks it failed.
			c.log.Warn("provider no longer has the pod", "pod", key)
			c.state.update(key, func(s *podState) { s.providerUID, s.deleteRequested, s.stopOverdue = "", false, false })
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
	running, err := c.resourcesInEffect(key, st, cached, &p.Status)
	if err != nil {
		return err
	}
	c.recordContainerFailures(p, status)
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

// stoppedByNode reports whether the pod behind cached is one the node ended
// itself while the provider still had it (stopAtDeadline): its status is still
// checked, for its containers' last states, though it is terminal.
func stoppedByNode(st podState, cached *podwire.Pod) bool {
	return cached.Terminal() && st.providerUID == cached.UID && st.deleteRequested && cached.DeletionTimestamp == nil
}

// writeStatus is the one writer of a pod's status to the API server: every
// status the node reports for a pod, the provider's or its own (a resolution
// failure, a failed provider call, a lost pod, a deadline, ephemeral containers
// it cannot run), goes through it. It merges fromProvider into p's status as
// the kubelet's rules have it (desiredStatus) and, if that
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
	desired := desiredStatus(p, fromProvider, c.state.resizeOf(key), running, c.features, metav1.NewTime(c.clock.Now()))
	patch, err := statuspatch.Build(p.UID, &p.Status, &desired)
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
	shown := cerr == nil && written != 0 && cur.StatusHash() == written
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
// start, vkubeletctl bench), nor copied: read into a reused buffer
// (internal/wire/apiwire), its encoding gives the fingerprint of the status stored
// (podwire.Pod's StatusHash), which patchStatus returns; 0 if not known.
func (c *Controller) patchStatus(ctx context.Context, namespace, name string, patch []byte) (uint64, error) {
	if c.rawPods != nil {
		return c.rawPods.PatchStatus(ctx, namespace, name, patch)
	}
	// client-go's fake clientsets have no REST client.
	_, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return 0, err
}

// statusEcho tells, for one pod, our own status writes coming back through the
// watch from changes someone else made. A write we made brings an update of the
// pod whose status is the one written: there is nothing to check against the
// provider, and checking it would cost a status check per write. Any other
// change of the status (the node-lifecycle controller marking the pod not
// Ready, say) is checked, and put right if the provider says otherwise.
//
// Two races make "the status we wrote" not enough:
//
//   - the echo can come before the write returns (the watch is faster than the
//     answer): an update seen while a write is in flight is taken as ours for
//     now, and the writer has the pod checked again unless the cache then shows
//     what it wrote (writeEnds, echoWrite.recheck);
//   - a status check can run before the echo of the last write has come: it
//     compares the provider's status with a cache older than the API, and may
//     find nothing to write when the API says otherwise. Such a check is stale,
//     and the echo it missed is then checked, not taken as ours (checkStarts,
//     isEcho).
//
// It lives in the pod's podState, so the controller forgets it with the pod;
// its methods are called with the state store's lock held (stateStore.echo).
type statusEcho struct {
	// written is the fingerprint (podwire.Pod's StatusHash) of the status last
	// written, 0 if unknown.
	written uint64
	// writing is set while a write is in flight, updatedWhileWriting once an
	// update of the pod's status came meanwhile.
	writing, updatedWhileWriting bool
	// staleCheck is set while a status check compares with a cache that may
	// not show the last write yet.
	staleCheck bool
	// pending is set from a write until its echo comes (or the cache is seen
	// to show it): only a check made meanwhile reads a cache older than the
	// API. After it, a cache that differs from written shows someone else's
	// later write, which is up to date.
	pending bool
}

// isEcho reports whether an update of the pod bringing the status whose
// fingerprint is hash is our own write coming back, with nothing to check. An
// update during a write is taken as ours; the writer decides once the write
// returns (writeEnds). The echo of a write a stale check missed is not ours to
// skip; once seen, the write's echo is no longer pending.
func (e *statusEcho) isEcho(hash uint64) bool {
	switch {
	case e.writing:
		e.updatedWhileWriting = true
		return true
	case hash == e.written:
		own := !e.staleCheck
		e.staleCheck, e.pending = false, false
		return own
	}
	return false
}

// checkStarts is said by a status check before it reads the cache: while an
// echo is pending the cache may be older than the API, so the check is stale.
// Said before the read, so that an echo coming in between counts too.
func (e *statusEcho) checkStarts() { e.staleCheck = e.staleCheck || e.pending }

// cacheRead is said by a status check once it has read a cache whose status has
// fingerprint hash: a cache showing the last write makes the check up to date.
func (e *statusEcho) cacheRead(hash uint64) {
	if hash == e.written {
		e.staleCheck = false
	}
}

// writeStarts is said before a status write is sent.
func (e *statusEcho) writeStarts() { e.writing, e.updatedWhileWriting = true, false }

// writeEnds records the end of a write of the status whose fingerprint is
// written (0 if not known, or if it failed), whose echo is now pending, and
// says what happened meanwhile.
func (e *statusEcho) writeEnds(written uint64) echoWrite {
	w := echoWrite{updated: e.updatedWhileWriting, stale: e.staleCheck}
	e.writing, e.updatedWhileWriting, e.written = false, false, written
	e.pending = written != 0
	return w
}

// shown is said once the cache is seen to show the status with fingerprint
// written: if it is still the last write, its echo is no longer pending.
func (e *statusEcho) shown(written uint64) {
	if e.written == written {
		e.pending = false
	}
}

// echoWrite is what happened to a pod while one of its status writes was in
// flight.
type echoWrite struct {
	// updated: an update of the pod's status came, taken as ours for now.
	updated bool
	// stale: the write was made by a check that read a stale cache.
	stale bool
}

// recheck reports whether the pod's status must be checked again after the
// write: an update came during it and may not have been its echo, since the
// write failed, the cache does not show it (shown), or the check was stale.
func (w echoWrite) recheck(failed, shown bool) bool {
	return w.updated && (failed || !shown || w.stale)
}
