package providerutil

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/vkubelet/vkubelet/errdefs"
)

// Resized is a container whose resources an update of its pod changed.
type Resized struct {
	Container corev1.Container            // as updated
	Before    corev1.ResourceRequirements // its resources until then
}

// ResizedContainers returns the containers of updated, init containers first,
// whose resources differ from those of the same container in running.
func ResizedContainers(running, updated *corev1.Pod) []Resized {
	was := map[string]corev1.ResourceRequirements{}
	for _, list := range [][]corev1.Container{running.Spec.InitContainers, running.Spec.Containers} {
		for _, c := range list {
			was[c.Name] = c.Resources
		}
	}
	var out []Resized
	for _, list := range [][]corev1.Container{updated.Spec.InitContainers, updated.Spec.Containers} {
		for _, c := range list {
			if before, ok := was[c.Name]; ok && !equality.Semantic.DeepEqual(before, c.Resources) {
				out = append(out, Resized{Container: c, Before: before})
			}
		}
	}
	return out
}

// PodLevelResized reports whether the pod-level resources (spec.resources)
// differ between running, the pod as the provider has it, and updated.
func PodLevelResized(running, updated *corev1.Pod) bool {
	return !equality.Semantic.DeepEqual(running.Spec.Resources, updated.Spec.Resources)
}

// RefuseResize is the answer to UpdatePod of a provider that cannot resize a
// pod it has taken on (it is no provider.InPlaceResizer): an
// errdefs.InvalidInput error naming the first container whose resources differ
// between running, the pod as the provider has it, and updated; nil if none
// does. The node shows the error as the pod's PodResizePending condition,
// reason Infeasible, and keeps the resources that run; a provider that took the
// update silently would have the node show the resize as made. (The API server
// refuses resizes of such a provider's running pods, but a pod not running
// yet, a batch job in its queue, may still be resized.)
func RefuseResize(backEnd string, running, updated *corev1.Pod) error {
	if r := ResizedContainers(running, updated); len(r) > 0 {
		return errdefs.InvalidInput("%s cannot resize a pod it has taken on (the resources of container %s changed)", backEnd, r[0].Container.Name)
	}
	if PodLevelResized(running, updated) {
		return errdefs.InvalidInput("%s cannot resize a pod it has taken on (the pod-level resources changed)", backEnd)
	}
	return nil
}
