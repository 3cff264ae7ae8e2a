package pod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/resolve"
)

// Event reasons the controller records on pods.
const (
	ReasonProviderFailed   = "ProviderFailed"   // a provider call failed; the message says which and why
	ReasonProviderLost     = "ProviderLost"     // the provider lost a pod whose restart policy forbids starting it again
	ReasonUpdated          = "ProviderUpdated"  // the provider accepted a change of an updatable field
	ReasonKilling          = "Killing"          // the provider was asked to stop the pod (the kubelet's reason)
	ReasonStopNotConfirmed = "StopNotConfirmed" // a deleted pod's grace period is over and the provider has not confirmed it stopped (or, past RemoveUnconfirmedAfter, it was removed without that)
	ReasonFailed           = "Failed"           // the pod's spec cannot be resolved, or a container could not be created or started (the kubelet's reason)
	ReasonFailedMount      = "FailedMount"      // a running pod's volumes cannot be refreshed (the kubelet's reason)

	// ReasonCreateContainerConfigError is the kubelet's waiting reason of containers
	// whose configuration (env, volumes) references something missing.
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
)

// syncHandler makes the provider run the API's version of the pod: create it if the
// provider lacks it, update it if an updatable field changed, replace it if the
// provider runs an older pod of the same name.
func (c *Controller) syncHandler(ctx context.Context, key string) error {
	unlock := c.state.lock(key)
	defer unlock()

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key never becomes valid
	}
	cached, err := c.pods.getCached(ns, name)
	if apierrors.IsNotFound(err) {
		c.deleteQueue.Add(key)
		return nil
	}
	if err != nil {
		return err
	}
	st := c.state.get(key) // stable while the key's lock is held
	if cached.DeletionTimestamp == nil && st.providerUID == cached.UID && st.lastPod == cached && !st.volumesStale {
		// The very object the provider last accepted, and nothing it references
		// changed: a periodic resync, which every pod of the node gets every
		// --full-resync-period. Nothing to decode or compare.
		return nil
	}
	if sameSpec(st, cached) {
		// A new object of the pod the provider runs, differing only in status
		// or bookkeeping metadata: most often our own status write coming back
		// through the watch. Keep the current object (the one it replaced can
		// be freed), as the slow path below would, without decoding either.
		c.state.update(key, func(s *podState) { s.lastPod = cached })
		c.endFailedResize(key)
		return nil
	}
	p, err := cached.Decode()
	if err != nil {
		return err
	}
	if p.DeletionTimestamp != nil {
		c.deleteQueue.Add(key)
		return nil
	}
	if isTerminal(&p.Status) {
		return nil // finished pods are left alone but for deletion
	}

	if st.providerUID != "" && st.providerUID != p.UID {
		// The provider still runs an earlier pod of this name: stop it first.
		if err := c.deleteLastFromProvider(ctx, st.lastPod); err != nil {
			return err
		}
		c.forget(key)
		st = podState{}
	}

	if st.providerUID == "" {
		if reason, msg, ok := admitOS(p, c.os); !ok {
			return c.reject(ctx, p, reason, msg)
		}
		if a, is := c.provider.(provider.PodAdmitter); is {
			if reason, msg, ok := a.AdmitPod(p); !ok {
				return c.reject(ctx, p, reason, msg)
			}
		}
		// A pod the provider does not have still has its deadline, counted
		// from the start time its first status got (resolveFailed, a failed
		// CreatePod); it is judged again when the deadline comes.
		if left, ok := deadlineLeft(p, &corev1.PodStatus{}, c.clock.Now()); ok {
			if left <= 0 {
				return c.failUnstartedAtDeadline(ctx, p)
			}
			c.syncQueue.AddAfter(key, left)
		}
		if hasStarted(&p.Status) && p.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// It ran before and the provider lost it (a crash of the back end, a
			// restart that did not keep it): with restartPolicy Never the kubelet
			// would not start it again either.
			return c.markLost(ctx, p)
		}
		return c.createInProvider(ctx, key, p, cached)
	}

	if len(p.Spec.EphemeralContainers) > 0 && !c.runsEphemeral() {
		if err := c.reportEphemeralNotRun(ctx, p); err != nil {
			return err
		}
	}
	unchanged, err := c.sameUpdatable(st.lastPod, cached, p)
	if err != nil {
		return err
	}
	if unchanged {
		if st.lastPod != cached {
			// Point at the informer's current object, so the one it replaced can
			// be freed: a pod costs one cached object, not two.
			c.state.update(key, func(s *podState) { s.lastPod = cached })
		}
		c.endFailedResize(key)
		return c.refreshVolumes(ctx, key, p, st)
	}
	return c.updateInProvider(ctx, key, p, cached, st)
}

// hasStarted reports whether the API has seen the pod run.
func hasStarted(s *corev1.PodStatus) bool {
	if s.Phase == corev1.PodRunning {
		return true
	}
	for _, cs := range s.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
			return true
		}
	}
	return false
}

// sameSpec reports whether cached, a newer object of the pod the provider runs
// as st.lastPod, changed nothing a sync acts on: the same spec, labels and
// annotations (specHash), not being deleted, not finished, no ephemeral
// containers (a sync re-checks those) and no volume refresh due.
func sameSpec(st podState, cached *podwire.Pod) bool {
	return st.lastPod != nil && st.providerUID == cached.UID && !st.volumesStale &&
		cached.DeletionTimestamp == nil && !cached.Terminal() && !cached.HasEphemeralContainers() &&
		st.lastPod.SpecHash() == cached.SpecHash()
}

// sameUpdatable reports whether p (cached in the informer as cached) differs from
// last, the pod last handed to the provider, in nothing the provider must hear
// about. The same cached object is the same pod; otherwise last is decoded and
// compared, which happens once per change of the API object. Ephemeral containers
// count only for a provider that runs them.
func (c *Controller) sameUpdatable(last, cached *podwire.Pod, p *corev1.Pod) (bool, error) {
	if last == nil {
		return false, nil
	}
	if last == cached {
		return true, nil
	}
	lp, err := last.Decode()
	if err != nil {
		return false, err
	}
	lu, u := updatableOf(lp), updatableOf(p)
	if !c.runsEphemeral() {
		lu.ephemeral, u.ephemeral = nil, nil
	}
	return lu.equal(u), nil
}

// createInProvider resolves the pod and hands it to the provider. A pod whose
// mandatory references are missing is not handed over: it waits, as the kubelet's
// would, until the resolver reports that what it lacks has appeared.
func (c *Controller) createInProvider(ctx context.Context, key string, p *corev1.Pod, cached *podwire.Pod) (err error) {
	ctx, sync := c.startSpan(ctx, spanSync, key, trace.WithAttributes(attribute.String("vkubelet.action", "create")))
	defer func() { endSpan(sync, err) }()
	var rp *provider.ResolvedPod
	rctx, span := c.startSpan(ctx, spanResolve, key)
	if c.resolvedHandler != nil {
		rp, err = c.resolver.Resolve(rctx, p)
	} else {
		err = c.resolver.Check(rctx, p)
	}
	endSpan(span, err)
	if err != nil {
		return c.resolveFailed(ctx, p, err)
	}
	// A status the provider notifies before the call returns is kept for the
	// status check the notice queued, which then need not ask for it.
	endCreate := c.state.beginCreate(key, p.UID)
	defer endCreate()
	err = c.callProvider(ctx, p, "CreatePod", func(ctx context.Context) error {
		if rp != nil {
			return c.resolvedHandler.CreateResolvedPod(ctx, rp)
		}
		return c.provider.CreatePod(ctx, p.DeepCopy())
	})
	if err != nil {
		return err
	}
	// The first status write continues this trace, if it is recorded.
	var started *trace.SpanContext
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		started = &sc
	}
	c.state.setResize(key, nil) // a new incarnation runs the spec's resources
	c.state.setStartTrace(key, started)
	c.state.created(key, func(s *podState, notified *corev1.PodStatus) {
		s.providerUID, s.lastPod = p.UID, cached
		s.deleteRequested, s.stopOverdue, s.notified = false, false, notified
		s.env, s.volumes, s.volumesStale = nil, volumesDigest{}, false
		if rp != nil {
			s.env, s.volumes = rp.Env, digestVolumes(rp.Volumes)
		}
	})
	c.log.Debug("pod created in provider", "pod", key)
	// No Event for a successful start: the status write that follows says it, and an
	// Event per pod would double the API writes of every pod start (vkubeletctl bench).
	if c.notifier == nil {
		c.statusQueue.Add(key) // read the first status now, not at the next poll
	}
	return nil
}

// updateInProvider tells the provider about a change of an updatable field. A
// resolving provider gets the pod re-resolved, but with the environment it started
// with: the kubelet does not change the environment of a running container either.
// Only an ephemeral container added since gets its environment as resolved now.
func (c *Controller) updateInProvider(ctx context.Context, key string, p *corev1.Pod, cached *podwire.Pod, st podState) (err error) {
	ctx, sync := c.startSpan(ctx, spanSync, key, trace.WithAttributes(attribute.String("vkubelet.action", "update")))
	defer func() { endSpan(sync, err) }()
	var rp *provider.ResolvedPod
	if c.resolvedHandler != nil {
		rp, err = c.resolver.Resolve(ctx, p)
		if err != nil {
			c.recorder.Event(p, corev1.EventTypeWarning, ReasonFailed, "Error: "+resolveMessage(err))
			return fmt.Errorf("resolving %s: %w", key, err)
		}
		if st.env != nil {
			rp.Env = startedEnv(st.env, rp.Env, func(name string) bool { return containerRunning(&p.Status, name) })
		}
	}
	last, err := st.lastPod.Decode()
	if err != nil {
		return err
	}
	resized := c.state.resizeOf(key)
	rs, err := c.updateWithResize(ctx, p, last, resized, func(ctx context.Context, send *corev1.Pod) error {
		if rp != nil {
			r := *rp
			r.Pod = send
			return c.resolvedHandler.UpdateResolvedPod(ctx, &r)
		}
		return c.provider.UpdatePod(ctx, send.DeepCopy())
	})
	c.state.setResize(key, rs)
	if err != nil {
		if rs != resized {
			c.statusQueue.Add(key) // a resize that failed shows in the status
		}
		return err
	}
	c.state.update(key, func(s *podState) {
		s.lastPod = cached
		if rp != nil {
			s.env, s.volumes, s.volumesStale = rp.Env, digestVolumes(rp.Volumes), false
		}
	})
	if rs == resized || rs.refused == nil {
		c.recorder.Event(p, corev1.EventTypeNormal, ReasonUpdated, "Provider applied the pod's new spec")
	}
	// The status now observes the new generation, and a shortened deadline is
	// judged now, not at the old one.
	c.statusQueue.Add(key)
	return nil
}

// refreshVolumes hands a running pod's volume files to a VolumeUpdater again when
// something they come from changed, and only if the files did change. A reference
// that went missing leaves the files as they were, as the kubelet leaves a mounted
// volume.
func (c *Controller) refreshVolumes(ctx context.Context, key string, p *corev1.Pod, st podState) (err error) {
	if !st.volumesStale {
		return nil
	}
	ctx, sync := c.startSpan(ctx, spanSync, key, trace.WithAttributes(attribute.String("vkubelet.action", "refreshVolumes")))
	defer func() { endSpan(sync, err) }()
	c.state.update(key, func(s *podState) { s.volumesStale = false })
	if c.volumeUpdater == nil || c.resolvedHandler == nil {
		return nil
	}
	stale := func() { c.state.update(key, func(s *podState) { s.volumesStale = true }) }
	vols, err := c.resolver.ResolveVolumes(ctx, p)
	if resolve.IsMissing(err) {
		c.recorder.Event(p, corev1.EventTypeWarning, ReasonFailedMount, "Volumes not refreshed: "+resolveMessage(err))
		return nil
	}
	if err != nil {
		stale()
		return fmt.Errorf("resolving volumes of %s: %w", key, err)
	}
	digest := digestVolumes(vols)
	if digest == st.volumes {
		return nil
	}
	rp := &provider.ResolvedPod{Pod: p.DeepCopy(), Env: st.env, Volumes: vols}
	if err := c.callProvider(ctx, p, "UpdatePodVolumes", func(ctx context.Context) error {
		return c.volumeUpdater.UpdatePodVolumes(ctx, rp)
	}); err != nil {
		stale()
		return err
	}
	c.state.update(key, func(s *podState) { s.volumes = digest })
	c.log.Debug("pod volumes refreshed", "pod", key)
	return nil
}

// resolveFailed handles a pod that cannot be resolved. A missing mandatory
// reference is reported the kubelet's way: a Warning Event "Failed", the pod Pending
// with every container Waiting in CreateContainerConfigError; the pod is synced
// again when the resolver sees the object appear. Any other error is retried.
func (c *Controller) resolveFailed(ctx context.Context, p *corev1.Pod, err error) error {
	msg := resolveMessage(err)
	reason := ReasonFailed
	var missing *resolve.MissingError
	if errors.As(err, &missing) {
		reason = missing.Reason() // upstream virtual-kubelet's name for it
	}
	c.recorder.Event(p, corev1.EventTypeWarning, reason, "Error: "+msg)
	if !resolve.IsMissing(err) {
		return fmt.Errorf("resolving %s: %w", keyOf(p), err)
	}
	c.log.Info("pod waits for a missing reference", "pod", keyOf(p), "missing", msg)
	// The kubelet's first status of a pod has a start time, whether or not its
	// containers could start; an active deadline counts from it (mergeStatus
	// keeps an earlier one).
	now := metav1.NewTime(c.clock.Now())
	status := &corev1.PodStatus{Phase: corev1.PodPending, StartTime: &now}
	waiting := func(cs []corev1.Container) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(cs))
		for _, ctr := range cs {
			out = append(out, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreateContainerConfigError, Message: msg}},
			})
		}
		return out
	}
	status.InitContainerStatuses = waiting(p.Spec.InitContainers)
	status.ContainerStatuses = waiting(p.Spec.Containers)
	return c.writeStatus(ctx, p, status, nil)
}

// resolveMessage is the kubelet's wording of a resolution error: the missing
// reference alone when that is what it is.
func resolveMessage(err error) string {
	var m *resolve.MissingError
	if errors.As(err, &m) {
		return m.Error()
	}
	return err.Error()
}
