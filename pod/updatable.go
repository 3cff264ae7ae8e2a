package pod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// updatable is the part of a pod that may change after creation and that a provider
// is told about through UpdatePod: what the API server lets a client change on a
// running pod (images, active deadline, added tolerations, resources resized in place,
// ephemeral containers added) plus labels and annotations, which the downward API
// exposes.
type updatable struct {
	labels                map[string]string
	annotations           map[string]string
	activeDeadlineSeconds *int64
	tolerations           []corev1.Toleration
	podResources          *corev1.ResourceRequirements // spec.resources, resized in place as containers' are
	containers            []containerUpdatable
	initContainers        []containerUpdatable
	// ephemeral are the names of the ephemeral containers: the API only ever adds
	// one, never changes or removes it. The controller clears them for a provider
	// that does not run ephemeral containers.
	ephemeral []string
}

type containerUpdatable struct {
	name      string
	image     string
	resources corev1.ResourceRequirements
}

func updatableOf(p *corev1.Pod) *updatable {
	u := &updatable{
		labels:                p.Labels,
		annotations:           p.Annotations,
		activeDeadlineSeconds: p.Spec.ActiveDeadlineSeconds,
		tolerations:           p.Spec.Tolerations,
		podResources:          p.Spec.Resources,
		containers:            make([]containerUpdatable, len(p.Spec.Containers)),
		initContainers:        make([]containerUpdatable, len(p.Spec.InitContainers)),
	}
	for i, c := range p.Spec.Containers {
		u.containers[i] = containerUpdatable{name: c.Name, image: c.Image, resources: c.Resources}
	}
	for i, c := range p.Spec.InitContainers {
		u.initContainers[i] = containerUpdatable{name: c.Name, image: c.Image, resources: c.Resources}
	}
	for _, c := range p.Spec.EphemeralContainers {
		u.ephemeral = append(u.ephemeral, c.Name)
	}
	return u
}

// equal reports whether nothing the provider must hear about has changed. Maps and
// slices are compared semantically (nil equals empty; quantities by value).
func (u *updatable) equal(o *updatable) bool {
	if u == nil || o == nil {
		return u == o
	}
	if !stringMapsEqual(u.labels, o.labels) || !stringMapsEqual(u.annotations, o.annotations) {
		return false
	}
	if (u.activeDeadlineSeconds == nil) != (o.activeDeadlineSeconds == nil) ||
		(u.activeDeadlineSeconds != nil && *u.activeDeadlineSeconds != *o.activeDeadlineSeconds) {
		return false
	}
	if len(u.containers) != len(o.containers) || len(u.initContainers) != len(o.initContainers) ||
		!slices.Equal(u.ephemeral, o.ephemeral) {
		return false
	}
	for i := range u.containers {
		if !u.containers[i].equal(&o.containers[i]) {
			return false
		}
	}
	for i := range u.initContainers {
		if !u.initContainers[i].equal(&o.initContainers[i]) {
			return false
		}
	}
	return equality.Semantic.DeepEqual(u.tolerations, o.tolerations) &&
		equality.Semantic.DeepEqual(u.podResources, o.podResources)
}

func (c *containerUpdatable) equal(o *containerUpdatable) bool {
	return c.name == o.name && c.image == o.image && equality.Semantic.DeepEqual(c.resources, o.resources)
}

func stringMapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
