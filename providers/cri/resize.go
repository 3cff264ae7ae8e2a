package cri

import (
	"context"
	"fmt"

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
// and quota, memory limit), without restarting it. A container not started yet
// starts with the new spec. A container whose resizePolicy says the resize
// needs a restart is left alone here: the pod's goroutine restarts it with the
// new resources once the pod is stored (resizerestart.go).
func (p *Provider) resizeRunning(ctx context.Context, rec *podRecord, old, pod *corev1.Pod) error {
	var changed []corev1.Container
	for _, r := range providerutil.ResizedContainers(old, pod) {
		if _, restart := needsRestart(r.Container, r.Before); restart {
			continue
		}
		changed = append(changed, r.Container)
	}
	if len(changed) == 0 {
		return nil
	}
	ids := map[string]string{}
	p.mu.Lock()
	for _, c := range changed {
		ids[c.Name] = rec.ctrIDs[c.Name][0]
	}
	p.mu.Unlock()
	for i := range changed {
		c := &changed[i]
		if ids[c.Name] == "" {
			continue
		}
		if _, err := p.runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: ids[c.Name], Linux: resources(c),
		}); err != nil {
			return fmt.Errorf("cri: resizing container %s of pod %s: %w", c.Name, rec.key, err)
		}
	}
	return nil
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
