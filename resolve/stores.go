package resolve

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
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

// store is one cache as a resolver holds it: the shared informer and the number
// of the resolver's users of it (pods that reference what it holds, and
// resolutions under way); release gives the resolver's share of it back.
type store struct {
	informer cache.SharedIndexInformer
	// synced reports the informer's first list both stored and told to the
	// change callbacks: a resolution that waits for it has seen every
	// notification of that list, none comes after it as a change.
	synced  func() bool
	release func()
	refs    int
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

// refStoreLocked counts one more user of the cache k, joining it (Caches
// starts it if no resolver uses it) if the resolver has none.
func (r *Resolver) refStoreLocked(k storeKey) *store {
	if s := r.stores[k]; s != nil {
		s.refs++
		return s
	}
	if r.closed {
		// Run has returned and given every cache back: a late resolution gets a
		// cache that never syncs, and gives up when its context ends.
		inf := r.caches.newInformer(k)
		s := &store{informer: inf, synced: inf.HasSynced, release: func() {}, refs: 1}
		r.stores[k] = s
		return s
	}
	inf, synced, release := r.caches.acquire(k, r.objectChanged)
	s := &store{informer: inf, synced: synced, release: release, refs: 1}
	r.stores[k] = s
	r.log.Debug("watching", "kind", k.kind, "namespace", k.namespace, "name", k.name)
	return s
}

// unrefStoreLocked counts one user less of the cache k, giving the resolver's
// share of it back when none is left.
func (r *Resolver) unrefStoreLocked(k storeKey) {
	s := r.stores[k]
	if s == nil {
		return
	}
	if s.refs--; s.refs <= 0 {
		s.release()
		delete(r.stores, k)
		r.log.Debug("stopped watching", "kind", k.kind, "namespace", k.namespace, "name", k.name)
	}
}

// Caches are the informers of the objects pods reference, one per ConfigMap or
// Secret and one per namespace's Services, each running while a resolver uses
// it, and what is derived from them alone: the bytes of mounted ConfigMap values
// and the service variables of a namespace. The resolvers of a process's nodes
// share one Caches, so that a thousand nodes with pods in one namespace watch its
// kube-root-ca.crt once, not a thousand times, and keep its CA bundle and the
// namespace's service variables once; a resolver without one makes its own.
type Caches struct {
	client kubernetes.Interface

	mu      sync.Mutex
	entries map[storeKey]*sharedStore

	// configMapBytes shares mounted ConfigMap values between pods; what is kept
	// for a ConfigMap goes when its informer stops.
	configMapBytes sharedConfigMapBytes
	// svcEnv shares the service variables between the pods of a namespace.
	svcEnv serviceEnvMemo
}

// sharedStore is one running informer and the resolvers using it.
type sharedStore struct {
	informer cache.SharedIndexInformer
	// synced reports the first list stored and delivered to the change
	// handler (the informer's HasSynced says only stored).
	synced func() bool
	cancel context.CancelFunc
	// users are the change callbacks of the resolvers using it, by a number
	// given at acquire.
	users  map[uint64]func(objectKey)
	nextID uint64
}

// NewCaches returns an empty set of caches reading with client.
func NewCaches(client kubernetes.Interface) *Caches {
	return &Caches{client: client, entries: map[storeKey]*sharedStore{}}
}

// acquire returns the informer of k, started if no one uses it, and has
// onChange called for each change of the ConfigMap or Secret it holds, until
// release is called; the last release stops it. synced reports the informer's
// first list stored and told to the users.
func (c *Caches) acquire(k storeKey, onChange func(objectKey)) (_ cache.SharedIndexInformer, synced func() bool, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		e = c.startLocked(k)
	}
	id := e.nextID
	e.nextID++
	e.users[id] = onChange
	return e.informer, e.synced, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(e.users, id)
		if len(e.users) == 0 && c.entries[k] == e {
			e.cancel()
			delete(c.entries, k)
			c.configMapBytes.forget(objectKey(k))
		}
	}
}

// startLocked starts the informer of k.
func (c *Caches) startLocked(k storeKey) *sharedStore {
	inf := c.newInformer(k)
	// Managed fields are never read: do not keep them.
	_ = inf.SetTransform(informerutil.StripManagedFields)
	e := &sharedStore{informer: inf, synced: inf.HasSynced, users: map[uint64]func(objectKey){}}
	if k.kind != kindService { // service links are read once, at start
		changed := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			m, ok := obj.(metav1.Object)
			if !ok {
				return
			}
			o := objectKey{k.kind, m.GetNamespace(), m.GetName()}
			c.mu.Lock()
			users := slices.Collect(maps.Values(e.users))
			c.mu.Unlock()
			for _, u := range users {
				u(o)
			}
		}
		// The handler's first Adds are delivered after the informer has stored
		// them: waiting for the registration's HasSynced makes a resolution see
		// them before it returns, so they never arrive later as changes.
		if reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) }, DeleteFunc: changed,
		}); err == nil {
			e.synced = reg.HasSynced
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go inf.RunWithContext(ctx)
	c.entries[k] = e
	return e
}

// newInformer makes the informer of one cache: a namespace's Services, or one
// ConfigMap or Secret selected by name. Its list and watch retry promptly while
// the API server is away (informerutil.RetryWhileUnavailable): a pod waits for these
// caches before it starts.
func (c *Caches) newInformer(k storeKey) cache.SharedIndexInformer {
	core := c.client.CoreV1()
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.name).String()
	}
	switch k.kind {
	case kindConfigMap:
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(c.client, core.ConfigMaps(k.namespace), byName), &corev1.ConfigMap{}, 0, cache.Indexers{})
	case kindSecret:
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(c.client, core.Secrets(k.namespace), byName), &corev1.Secret{}, 0, cache.Indexers{})
	default:
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(c.client, core.Services(k.namespace), nil), &corev1.Service{}, 0, cache.Indexers{})
	}
}

// waitSynced waits until synced says so, looking every 10ms, or until ctx ends.
func waitSynced(ctx context.Context, synced func() bool) error {
	if synced() {
		return nil // the usual case, without the poll's ticker
	}
	return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return synced(), nil
	})
}
