package cri

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// This file holds the resizes that need a restart: a container whose resources
// changed in a resource its resizePolicy marks RestartContainer is stopped, with
// its preStop hook and grace period as for any stop, and started again at once
// with the new resources, whatever its restart policy says of its exit, as the
// kubelet does (its restart count goes up, its last state is the instance
// stopped). The other containers of the resize are resized in place
// (resize.go).
//
// Whether a running container needs it is read from the container itself: it
// carries the cpu and memory requests and limits it was created with
// (annotationResources), so a restart of the provider between the resize and
// the restart loses nothing, and a container resized in place in another
// resource is not restarted for it.

// annotationResources on a container is the cpu and memory requests and limits
// of the spec it was created from, in JSON.
const annotationResources = "vkubelet.io/resources"

// effectiveResources are the requests and limits container c of pod runs
// with: its own, and the pod-level cpu or memory limit where it declares none
// (resources): a resize of the pod-level resources changes them too.
func effectiveResources(pod *corev1.Pod, c *corev1.Container) corev1.ResourceRequirements {
	out := c.Resources
	if pod.Spec.Resources == nil {
		return out
	}
	var limits corev1.ResourceList // a copy, made once needed: c's is shared
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		podLimit, ok := pod.Spec.Resources.Limits[name]
		if _, own := c.Resources.Limits[name]; !ok || own {
			continue
		}
		if limits == nil {
			limits = c.Resources.Limits.DeepCopy()
			if limits == nil {
				limits = corev1.ResourceList{}
			}
		}
		limits[name] = podLimit
	}
	if limits != nil {
		out.Limits = limits
	}
	return out
}

// withResources is c running with res.
func withResources(c *corev1.Container, res corev1.ResourceRequirements) corev1.Container {
	out := *c
	out.Resources = res
	return out
}

// recordResources notes the cpu and memory requests and limits container c of
// pod runs with (effectiveResources) on the container to create.
func recordResources(cfg *runtimeapi.ContainerConfig, pod *corev1.Pod, c *corev1.Container) {
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	key, value := ResourcesAnnotation(pod, c)
	cfg.Annotations[key] = value
}

// ResourcesAnnotation is the annotation the provider puts on each container it
// creates for container c of pod: the cpu and memory requests and limits it
// runs with, which a later resize is compared with. Exported for the
// benchmark's raw CRI client, which creates containers as the provider does.
func ResourcesAnnotation(pod *corev1.Pod, c *corev1.Container) (key, value string) {
	eff := effectiveResources(pod, c)
	keep := func(l corev1.ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[name]; ok {
				out[name] = q
			}
		}
		return out
	}
	b, _ := json.Marshal(corev1.ResourceRequirements{Requests: keep(eff.Requests), Limits: keep(eff.Limits)}) // quantities always encode
	return annotationResources, string(b)
}

// restartForResize reports a resource of container c of pod that its running
// instance cur was created with other requests or limits for (its own or,
// wanting its own, the pod-level ones), and whose resizePolicy is
// RestartContainer. A container created before the provider noted its
// resources never needs it.
func restartForResize(pod *corev1.Pod, c *corev1.Container, cur *runtimeapi.ContainerStatus) (corev1.ResourceName, bool) {
	raw, ok := cur.GetAnnotations()[annotationResources]
	if !ok {
		return "", false
	}
	var created corev1.ResourceRequirements
	if err := json.Unmarshal([]byte(raw), &created); err != nil {
		return "", false
	}
	return needsRestart(withResources(c, effectiveResources(pod, c)), created)
}

// restartIfResized stops container c, running as st.cur, if a resize needs it
// restarted (restartForResize), and marks it to start again at once with the
// pod's next sync, which it asks for.
func (p *Provider) restartIfResized(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, st *ctrState) {
	res, ok := restartForResize(pod, c, st.cur)
	if !ok {
		return
	}
	p.log.Info("restarting a container to resize it, as its resizePolicy asks", "pod", rec.key, "container", c.Name, "resource", res)
	p.stopContainer(ctx, rec, pod, c.Name, st.cur.Id)
	st.restartNow = st.cur.Id
	st.backoffFor, st.retryAt = st.cur.Id, time.Time{} // no back-off: this is no crash
	rec.wakeUp()
}

// startsAgain reports whether the container of st, exited, is to be started
// again whatever its restart policy says: stopped to be resized, or reset by a
// RestartAllContainers (restartall.go).
func startsAgain(st *ctrState) bool {
	return st != nil && st.cur != nil && (st.reset || (st.restartNow != "" && st.restartNow == st.cur.Id))
}
