package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/provider"
)

// ReasonResizeInfeasible is the reason of the Warning Event recorded when the
// provider refuses to resize a pod in place.
const ReasonResizeInfeasible = "ResizeInfeasible"

// In-place resize: a client changes spec.containers[].resources of a running pod
// through the pod's resize subresource, and the node hands the new resources to
// the provider with UpdatePod, as any other change of an updatable field. What the
// node adds is the kubelet's bookkeeping of it:
//
//   - a provider that cannot resize answers UpdatePod with an errdefs InvalidInput
//     or NotImplemented error: the pod gets the condition PodResizePending, reason
//     Infeasible, with the provider's words, and a Warning Event. The resize is
//     not asked again until the spec's resources change (the kubelet does not
//     retry an infeasible resize either), and the pod goes on with the resources
//     it has: later changes of other fields reach the provider with them.
//   - the container statuses of a provider that resizes in place
//     (provider.InPlaceResizer) carry the resources the provider runs them with
//     (allocatedResources, and resources unless the provider reports its own),
//     as a kubelet's do: the API server accepts a resize of a running pod only
//     if they are there, and the spec and the status together say whether a
//     resize took effect. Other providers' statuses carry none, so the API
//     server refuses their running pods' resizes, with its own words.
//
// Only a pod resized, or refused a resize, keeps a record (in the state store,
// apart from its podState); the others run their spec's resources.

// resizesInPlace reports whether the provider resizes running pods and the API
// server takes resizes (apifeatures.InPlaceResize), so that the statuses carry
// the containers' resources. A server without it drops them from the status,
// and refuses every change of a running pod's resources: the node reports as
// a kubelet without in-place resize does.
func (c *Controller) resizesInPlace() bool {
	return c.features.Has(apifeatures.InPlaceResize) && provider.ResizesInPlace(c.provider)
}

// resourcesInEffect is, for a provider that resizes in place, the spec whose
// containers' resources the provider runs, for a status check of the pod
// cached (api its status in the API, which has no containers: withStatus) to
// report: nil while the API's status says them already, or for a provider
// that does not resize in place.
func (c *Controller) resourcesInEffect(key string, st podState, cached *podwire.Pod, api *corev1.PodStatus) (*corev1.PodSpec, error) {
	if !c.resizesInPlace() {
		return nil, nil
	}
	from := cached
	if st.lastPod != nil && st.lastPod.SpecHash() != cached.SpecHash() {
		// A spec change the sync has yet to hand over, a resize perhaps:
		// the status tells the resources the provider runs.
		from = st.lastPod
	}
	if from == cached && reportsResources(api) &&
		(!c.features.Has(apifeatures.PodLevelResourcesStatus) || podLevelReported(api, c.state.resizeOf(key))) {
		return nil, nil
	}
	return from.ResourcesSpec()
}

// resizeState is the node's record of a pod resized in place. It is never
// changed once made (a change makes a new one), so a status write may read it
// without the state store's lock.
type resizeState struct {
	// allocated are the resources the provider runs the containers with.
	allocated containerResources
	// refused are the resources of the resize the provider refused, nil when
	// none is pending; why is what it said, since when it was refused.
	refused containerResources
	why     string
	since   metav1.Time
	// failed says refused is not infeasible but failed (an error of the
	// provider's other than a refusal, a memory limit below the usage say):
	// it is asked again at each sync, and reported as the kubelet reports an
	// actuation that failed, PodResizeInProgress with reason Error.
	failed bool
}

// containerResources are the resources of a pod's containers, init containers
// included, by name (unique within a pod), and the pod-level resources
// (spec.resources), if the pod declares them, under podLevel.
type containerResources map[string]corev1.ResourceRequirements

// podLevel is the key of the pod-level resources in a containerResources: a
// container's name is a DNS label, never empty, so no container has it. A
// resize of the pod's own resources is then planned, recorded, refused and
// reported as a container's is.
const podLevel = ""

func resourcesOf(p *corev1.Pod) containerResources {
	r := make(containerResources, len(p.Spec.Containers)+len(p.Spec.InitContainers)+1)
	for _, c := range p.Spec.InitContainers {
		r[c.Name] = c.Resources
	}
	for _, c := range p.Spec.Containers {
		r[c.Name] = c.Resources
	}
	if p.Spec.Resources != nil {
		r[podLevel] = *p.Spec.Resources
	}
	return r
}

func (r containerResources) equal(o containerResources) bool {
	if len(r) != len(o) {
		return false
	}
	for name, res := range r {
		other, ok := o[name]
		if !ok || !equality.Semantic.DeepEqual(res, other) {
			return false
		}
	}
	return true
}

// withResources returns a copy of p whose containers have the resources r names.
func withResources(p *corev1.Pod, r containerResources) *corev1.Pod {
	out := p.DeepCopy()
	for i := range out.Spec.InitContainers {
		if res, ok := r[out.Spec.InitContainers[i].Name]; ok {
			out.Spec.InitContainers[i].Resources = res
		}
	}
	for i := range out.Spec.Containers {
		if res, ok := r[out.Spec.Containers[i].Name]; ok {
			out.Spec.Containers[i].Resources = res
		}
	}
	// A record holds the whole pod's: without pod-level resources, the pod
	// runs without any (a resize that added them is not in effect).
	out.Spec.Resources = nil
	if res, ok := r[podLevel]; ok {
		out.Spec.Resources = &res
	}
	return out
}

// resizePlan is what an update of pod p does about its resources, given the
// pod the provider last accepted and the node's record.
type resizePlan struct {
	send      *corev1.Pod        // the pod to hand to the provider
	resizing  bool               // send asks for resources other than those allocated
	allocated containerResources // the resources the provider runs now
	desired   containerResources // the spec's
}

func planResize(p, last *corev1.Pod, rs *resizeState) resizePlan {
	plan := resizePlan{send: p, desired: resourcesOf(p)}
	if rs != nil {
		plan.allocated = rs.allocated
	} else {
		plan.allocated = resourcesOf(last)
	}
	if plan.desired.equal(plan.allocated) {
		return plan
	}
	if rs != nil && rs.refused != nil && !rs.failed && rs.refused.equal(plan.desired) {
		// Refused already: not asked again until the spec changes.
		plan.send = withResources(p, plan.allocated)
		return plan
	}
	plan.resizing = true
	return plan
}

// endFailedResize forgets the failed resize of the pod of key, if it has one,
// once its spec is back to the resources that run (the caller knows it is):
// nothing is in progress any more, which its status says.
func (c *Controller) endFailedResize(key string) {
	if rs := c.state.resizeOf(key); rs != nil && rs.failed {
		c.state.setResize(key, &resizeState{allocated: rs.allocated})
		c.statusQueue.Add(key)
	}
}

// isResizeRefusal reports whether err, from UpdatePod, says the provider cannot
// make the resize.
func isResizeRefusal(err error) bool {
	return errdefs.IsInvalidInput(err) || errdefs.IsNotImplemented(err)
}

// after is the record once the provider accepted plan's pod: nil for a pod
// never resized, else what the provider now runs.
func (plan resizePlan) after(rs *resizeState) *resizeState {
	switch {
	case plan.resizing:
		return &resizeState{allocated: plan.desired}
	case rs == nil:
		return nil
	case rs.refused != nil && !rs.refused.equal(plan.desired):
		// The spec went back to what runs: nothing is pending any more.
		return &resizeState{allocated: rs.allocated}
	}
	return rs
}

// updateWithResize hands the provider pod p, an update of last, as
// updateInProvider does, and keeps the record of its resources: a refused resize
// is recorded, and the rest of the update is handed over with the resources
// that run. It returns the record to keep.
func (c *Controller) updateWithResize(ctx context.Context, p, last *corev1.Pod, rs *resizeState, update func(context.Context, *corev1.Pod) error) (*resizeState, error) {
	plan := planResize(p, last, rs)
	err := c.invokeProvider(ctx, p, "UpdatePod", func(ctx context.Context) error { return update(ctx, plan.send) })
	if err == nil {
		return plan.after(rs), nil
	}
	if !plan.resizing {
		return rs, c.providerFailed(ctx, p, "UpdatePod", err)
	}
	if !isResizeRefusal(err) {
		// Tried again at the next sync; the pod goes on with what runs.
		failed := &resizeState{allocated: plan.allocated, refused: plan.desired, why: err.Error(), since: metav1.NewTime(c.clock.Now()), failed: true}
		if rs != nil && rs.failed && rs.refused.equal(plan.desired) {
			failed.since = rs.since
		}
		c.log.Info("resize failed in the provider, to be tried again", "pod", keyOf(p), "error", err)
		return failed, fmt.Errorf("UpdatePod %s: resizing: %w", keyOf(p), err)
	}
	why := err.Error()
	refused := &resizeState{allocated: plan.allocated, refused: plan.desired, why: why, since: metav1.NewTime(c.clock.Now())}
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonResizeInfeasible, "The provider cannot resize the pod in place: "+why)
	c.log.Info("resize refused by the provider", "pod", keyOf(p), "error", err)
	// The other changes of the update, if any, with the resources that run.
	rest := withResources(p, plan.allocated)
	if updatableOf(rest).equal(updatableOf(withResources(last, plan.allocated))) {
		return refused, nil
	}
	if err := c.callProvider(ctx, p, "UpdatePod", func(ctx context.Context) error { return update(ctx, rest) }); err != nil {
		return refused, err
	}
	return refused, nil
}

// resizeStatus applies what the node knows of the pod's resources to out, the
// status to write: PodResizePending while a resize is refused and
// PodResizeInProgress (reason Error) while it fails (the provider's own, if it
// reports them, otherwise removed), and, for a provider that resizes
// in place (of.running set) or a pod with a record, the resources each
// container runs with, in allocatedResources and, unless the provider reports
// its own, resources.
func resizeStatus(current, out *corev1.PodStatus, fromProvider *corev1.PodStatus, of statusSpec) {
	rs := of.resize
	refused := rs != nil && rs.refused != nil
	// A condition of the node's record, set while it holds, else removed
	// unless the provider reports its own.
	condition := func(typ corev1.PodConditionType, holds bool, reason string) {
		if holds {
			out.Conditions = upsertCondition(out.Conditions, of.observed(corev1.PodCondition{
				Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: rs.why, LastTransitionTime: rs.since,
			}))
		} else if findCondition(fromProvider.Conditions, typ) == nil {
			out.Conditions = removeCondition(out.Conditions, typ)
		}
	}
	condition(corev1.PodResizePending, refused && !rs.failed, corev1.PodReasonInfeasible)
	condition(corev1.PodResizeInProgress, refused && rs.failed, corev1.PodReasonError)
	fill := func(cs, was []corev1.ContainerStatus, spec []corev1.Container) {
		for i := range cs {
			if fromProviderReports(fromProvider, cs[i].Name) {
				continue
			}
			// Shared with the decoded pod, the record or the API's status,
			// which nothing changes: the status is only encoded.
			if res, ok := runningResources(cs[i].Name, spec, rs); ok {
				cs[i].AllocatedResources, cs[i].Resources = res.Requests, &res
			} else if w := findContainerStatus(was, cs[i].Name); w != nil {
				// Nothing changed since the API's status was written: as it says.
				cs[i].AllocatedResources, cs[i].Resources = w.AllocatedResources, w.Resources
			}
		}
	}
	var init, app []corev1.Container
	if of.running != nil {
		init, app = of.running.InitContainers, of.running.Containers
	}
	fill(out.InitContainerStatuses, current.InitContainerStatuses, init)
	fill(out.ContainerStatuses, current.ContainerStatuses, app)
	if of.running != nil && !of.noPodLevelStatus {
		podLevelStatus(out, fromProvider, of.running, rs)
	}
}

// podLevelStatus sets the pod's own resources in out as the kubelet reports
// them: allocatedResources are the pod's requests as the scheduler counts them
// (the pod-level requests if declared, else the containers', sidecars added
// and init containers overlapping), and resources, for a pod that declares
// pod-level resources, those it runs with (the provider's, if it reports them).
// running is the spec whose resources the provider runs, rs the node's record.
func podLevelStatus(out, fromProvider *corev1.PodStatus, running *corev1.PodSpec, rs *resizeState) {
	spec := running
	if rs != nil {
		spec = &withResources(&corev1.Pod{Spec: *running}, rs.allocated).Spec
	}
	requests := resourcehelper.PodRequests(&corev1.Pod{Spec: *spec}, resourcehelper.PodResourcesOptions{})
	if len(requests) == 0 {
		requests = nil
	}
	out.AllocatedResources = requests
	switch {
	case fromProvider.Resources != nil:
		out.Resources = fromProvider.Resources
	case spec.Resources != nil:
		out.Resources = spec.Resources
	default:
		out.Resources = nil
	}
}

// runningResources are the resources container name runs with: the record's,
// else the spec's, if either is known.
func runningResources(name string, spec []corev1.Container, rs *resizeState) (corev1.ResourceRequirements, bool) {
	if rs != nil {
		res, ok := rs.allocated[name]
		return res, ok
	}
	for i := range spec {
		if spec[i].Name == name {
			return spec[i].Resources, true
		}
	}
	return corev1.ResourceRequirements{}, false
}

// podLevelReported reports whether status s says the pod-level resources
// that rs, the node's record of the pod's resizes (nil if none), has the
// provider run: the containers' statuses do not show a resize of those.
func podLevelReported(s *corev1.PodStatus, rs *resizeState) bool {
	if rs == nil {
		return true
	}
	res, ok := rs.allocated[podLevel]
	return !ok || (s.Resources != nil && equality.Semantic.DeepEqual(*s.Resources, res))
}

// reportsResources reports whether every container status of s carries the
// resources in effect: a status check then need not read them from the spec.
func reportsResources(s *corev1.PodStatus) bool {
	if len(s.ContainerStatuses) == 0 {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			if list[i].Resources == nil {
				return false
			}
		}
	}
	return true
}

// fromProviderReports reports whether the provider's status gives container
// name's resources itself.
func fromProviderReports(s *corev1.PodStatus, name string) bool {
	for _, list := range [][]corev1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return list[i].Resources != nil
			}
		}
	}
	return false
}

// removeCondition returns conds without a condition of type t; conds itself
// when it has none, which is the common case.
func removeCondition(conds []corev1.PodCondition, t corev1.PodConditionType) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			out := make([]corev1.PodCondition, 0, len(conds)-1)
			out = append(out, conds[:i]...)
			return append(out, conds[i+1:]...)
		}
	}
	return conds
}
