package pod

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

// The pod's wire form is internal/wire's: the cached pod and the informer's
// decoding (podwire), the status patch (statuspatch). These names keep the
// rest of the package reading as it did.

// cachedPod is what the pod informer keeps of a pod (podwire.Pod).
type cachedPod = podwire.Pod

// rawPods lists, watches and writes the statuses of pods encoded
// (podwire.Client).
type rawPods = podwire.Client

// rawPod is a pod as the encoded watch hands it over (podwire.RawPod).
type rawPod = podwire.RawPod

// rawPodsOf is podwire.NewClient without the flag: nil for client-go's fakes.
func rawPodsOf(client kubernetes.Interface) *rawPods {
	r, _ := podwire.NewClient(client)
	return r
}

// compact turns a pod the caller may change into a cachedPod.
func compact(p *corev1.Pod) (*cachedPod, error) { return podwire.Compact(p) }

// podsListWatch is podwire.ListWatch.
func podsListWatch(client kubernetes.Interface, raw *rawPods, selector string) cache.ListerWatcher {
	return podwire.ListWatch(client, raw, selector)
}

// podInformer is podwire.NewInformer.
func podInformer(lw cache.ListerWatcher, raw *rawPods, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	return podwire.NewInformer(lw, raw, resync, indexers)
}

// compactTransformOf is podwire.TransformOf.
func compactTransformOf(store cache.Store) cache.TransformFunc { return podwire.TransformOf(store) }

// containersOf reads the names of the cached pod's containers.
func containersOf(c *cachedPod) (podContainers, error) {
	of, err := c.Containers()
	return podContainers{app: of.App, init: of.Init, sidecars: of.Sidecars}, err
}

// statusPatch is statuspatch.Build: the patch that turns current into desired.
func statusPatch(uid types.UID, current, desired *corev1.PodStatus) ([]byte, error) {
	return statuspatch.Build(uid, current, desired)
}
