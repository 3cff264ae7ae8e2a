package cri

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// ResizesInPlace: the CRI provider resizes running containers through the
// runtime's UpdateContainerResources, as the kubelet does
// (provider.InPlaceResizer).
func (p *Provider) ResizesInPlace() bool { return true }

// resizeRunning gives each container of pod whose resources changed since old,
// and that has an instance in the runtime, its new cgroup limits (CPU shares
// and quota, memory limit), without restarting it, and the pod's own cgroup its
// new limits (podcgroup.go). A change of the pod-level resources resizes the
// containers that run under the pod's limits for want of their own. A
// container not started yet starts with the new spec. A container whose
// resizePolicy says the resize needs a restart is left alone here: the pod's
// goroutine restarts it with the new resources once the pod is stored
// (resizerestart.go). A memory limit lowered below the memory in use fails
// the resize, and nothing is changed (memorydecrease.go).
func (p *Provider) resizeRunning(ctx context.Context, rec *podRecord, old, pod *corev1.Pod) error {
	var changed []corev1.Container
	resized := providerutil.ResizedContainers(old, pod)
	for _, r := range resized {
		if _, restart := needsRestart(r.Container, r.Before); restart {
			continue
		}
		changed = append(changed, r.Container)
	}
	podLevel := providerutil.PodLevelResized(old, pod)
	if podLevel {
		changed = appendInheritingResized(changed, old, pod)
	}
	if len(resized) == 0 && !podLevel {
		return nil
	}
	ids := map[string]string{}
	p.mu.Lock()
	for _, c := range changed {
		if insts := rec.ctrIDs[c.Name]; len(insts) > 0 {
			ids[c.Name] = insts[0]
		}
	}
	p.mu.Unlock()
	if err := p.memoryLimitDecrease(ctx, old, pod, changed, ids); err != nil {
		return err
	}
	// The pod's limits first, so that a container's larger ones fit under
	// them (the kernel refuses a child's CPU quota above its parent's), and
	// again once the containers have theirs, for a pod's that shrank.
	_ = applyPodCgroup(cgroupRoot, pod)
	for i := range changed {
		c := &changed[i]
		if ids[c.Name] == "" {
			continue
		}
		if _, err := p.runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: ids[c.Name], Linux: resources(pod, c),
		}); err != nil {
			return fmt.Errorf("cri: resizing container %s of pod %s: %w", c.Name, rec.key, err)
		}
	}
	if err := applyPodCgroup(cgroupRoot, pod); err != nil {
		// A container to restart for the resize still runs with limits the
		// pod's new ones cannot hold: written again before it starts anew.
		p.log.Debug("setting the pod's cgroup limits", "pod", rec.key, "err", err)
	}
	return nil
}

// appendInheritingResized appends to changed the containers of pod, not in it
// yet, whose cgroup limits change with the pod-level resources from old to
// pod: those that have no limits of their own.
func appendInheritingResized(changed []corev1.Container, old, pod *corev1.Pod) []corev1.Container {
	in := map[string]bool{}
	for _, c := range changed {
		in[c.Name] = true
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if in[c.Name] {
				continue
			}
			if proto.Equal(resources(old, c), resources(pod, c)) {
				continue
			}
			// One whose resizePolicy asks for a restart is restarted with
			// them instead (resizerestart.go).
			if _, restart := needsRestart(withResources(c, effectiveResources(pod, c)), effectiveResources(old, c)); restart {
				continue
			}
			changed = append(changed, *c)
		}
	}
	return changed
}

// needsRestart reports a resource of c whose requests or limits changed from
// before and whose resizePolicy is RestartContainer.
func needsRestart(c corev1.Container, before corev1.ResourceRequirements) (corev1.ResourceName, bool) {
	for _, rp := range c.ResizePolicy {
		if rp.RestartPolicy != corev1.RestartContainer {
			continue
		}
		if !c.Resources.Requests[rp.ResourceName].Equal(before.Requests[rp.ResourceName]) ||
			!c.Resources.Limits[rp.ResourceName].Equal(before.Limits[rp.ResourceName]) {
			return rp.ResourceName, true
		}
	}
	return "", false
}
