package resolve

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/cacheutil"
)

// storeKey names one cache of the resolver: the Services of a namespace (name
// empty), or a single ConfigMap or Secret. ConfigMaps and Secrets are watched one
// by one, as the kubelet watches them, because that is all the Node authorizer
// lets a node read: the objects that pods bound to it reference, by name. It
// also keeps the node from holding a namespace's other Secrets in memory.
type storeKey struct {
	kind            kind
	namespace, name string
}

// storeOf is the cache of a ConfigMap or Secret.
func storeOf(o objectKey) storeKey { return storeKey(o) }

// store is one informer and the number of its users: pods that reference what it
// holds, and resolutions under way.
type store struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	refs     int
}

// storesFor is the Service caches a pod of namespace uses for its service
// variables: its namespace's and "default"'s (the kubernetes service). Derived
// rather than kept per pod: a node has thousands of pods and a handful of
// namespaces.
func storesFor(namespace string) []storeKey {
	needed := []storeKey{{kind: kindService, namespace: namespace}, {kind: kindService, namespace: "default"}}
	if namespace == "default" {
		needed = needed[:1]
	}
	return needed
}

// refStoreLocked counts one more user of the cache k, starting it if it has none.
func (r *Resolver) refStoreLocked(k storeKey) *store {
	if s := r.stores[k]; s != nil {
		s.refs++
		return s
	}
	inf := r.newInformer(k)
	// Managed fields are never read: do not keep them.
	_ = inf.SetTransform(cacheutil.StripManagedFields)
	if k.kind != kindService { // service links are read once, at start
		changed := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				r.objectChanged(objectKey{k.kind, m.GetNamespace(), m.GetName()})
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) }, DeleteFunc: changed,
		})
	}
	ctx, cancel := context.WithCancel(r.ctx)
	go inf.RunWithContext(ctx)
	s := &store{informer: inf, cancel: cancel, refs: 1}
	r.stores[k] = s
	r.log.Debug("watching", "kind", k.kind, "namespace", k.namespace, "name", k.name)
	return s
}

// unrefStoreLocked counts one user less of the cache k, stopping it when none is left.
func (r *Resolver) unrefStoreLocked(k storeKey) {
	s := r.stores[k]
	if s == nil {
		return
	}
	if s.refs--; s.refs <= 0 {
		s.cancel()
		delete(r.stores, k)
		r.log.Debug("stopped watching", "kind", k.kind, "namespace", k.namespace, "name", k.name)
	}
}

// newInformer makes the informer of one store: a namespace's Services, or one
// ConfigMap or Secret selected by name. Its list and watch retry promptly while
// the API server is away (cacheutil.RetryWhileUnavailable): a pod waits for these
// caches before it starts.
func (r *Resolver) newInformer(k storeKey) cache.SharedIndexInformer {
	core := r.client.CoreV1()
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.name).String()
	}
	switch k.kind {
	case kindConfigMap:
		return cache.NewSharedIndexInformer(cacheutil.ListWatchOf(r.client, core.ConfigMaps(k.namespace), byName), &corev1.ConfigMap{}, 0, cache.Indexers{})
	case kindSecret:
		return cache.NewSharedIndexInformer(cacheutil.ListWatchOf(r.client, core.Secrets(k.namespace), byName), &corev1.Secret{}, 0, cache.Indexers{})
	default:
		return cache.NewSharedIndexInformer(cacheutil.ListWatchOf(r.client, core.Services(k.namespace), nil), &corev1.Service{}, 0, cache.Indexers{})
	}
}

func waitSynced(ctx context.Context, inf cache.SharedIndexInformer) error {
	if inf.HasSynced() {
		return nil
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !inf.HasSynced() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
