package upstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
)

// syncTimeout bounds how long a lister waits for its informer's first list.
const syncTimeout = 30 * time.Second

// listers serve the listers of nodeutil.ProviderConfig with no more than a node's
// identity may read. The node's pods and all Services (both of which the Node
// authorizer lets a node list and watch) come from informers started when the
// provider first reads them: a provider that never does pays nothing. ConfigMaps
// and Secrets come from one watch per object, selected by name, of the objects the
// pods handed to the provider reference, from before the pod reaches the provider
// until it is deleted; any other Get is NotFound, as a lister's miss is.
type listers struct {
	pods, services      *lazyInformer
	configMaps, secrets *objectWatches
	mu                  sync.Mutex
	refs                map[string][]objectRef // by pod key: what it references
}

// objectRef is a ConfigMap or Secret a pod references.
type objectRef struct {
	secret          bool
	namespace, name string
}

func newListers(ctx context.Context, client kubernetes.Interface, nodeName string) *listers {
	core := client.CoreV1()
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	l := &listers{refs: map[string][]objectRef{}}
	l.pods = &lazyInformer{ctx: ctx, what: "pods", newInformer: func() cache.SharedIndexInformer {
		onNode := func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(client, core.Pods(""), onNode), &corev1.Pod{}, 0, byNamespace)
	}}
	l.services = &lazyInformer{ctx: ctx, what: "services", newInformer: func() cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(client, core.Services(""), nil), &corev1.Service{}, 0, byNamespace)
	}}
	byName := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	l.configMaps = newObjectWatches(ctx, func(ns, name string) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(client, core.ConfigMaps(ns), byName(name)), &corev1.ConfigMap{}, 0, cache.Indexers{})
	})
	l.secrets = newObjectWatches(ctx, func(ns, name string) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(informerutil.ListWatchOf(client, core.Secrets(ns), byName(name)), &corev1.Secret{}, 0, cache.Indexers{})
	})
	return l
}

// providerConfig is the ProviderConfig handed to an upstream provider.
func (l *listers) providerConfig(node *corev1.Node) nodeutil.ProviderConfig {
	return nodeutil.ProviderConfig{
		Pods:       podLister{l.pods},
		Services:   serviceLister{l.services},
		ConfigMaps: corev1listers.NewConfigMapLister(l.configMaps.store),
		Secrets:    corev1listers.NewSecretLister(l.secrets.store),
		Node:       node,
	}
}

// track makes the listers hold what pod references, waiting until each watch
// has listed, and lets go of what it referenced before and no longer does.
func (l *listers) track(ctx context.Context, pod *corev1.Pod) error {
	key := pod.Namespace + "/" + pod.Name
	refs := references(pod)
	var synced []cache.InformerSynced
	for _, r := range refs {
		synced = append(synced, l.watches(r).acquire(r.namespace, r.name))
	}
	l.mu.Lock()
	old := l.refs[key]
	l.refs[key] = refs
	l.mu.Unlock()
	l.release(old)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("pod %s: the ConfigMaps and Secrets it references not read: %w", key, ctx.Err())
	}
	return nil
}

// forget lets go of what the pod namespace/name referenced.
func (l *listers) forget(namespace, name string) {
	key := namespace + "/" + name
	l.mu.Lock()
	old := l.refs[key]
	delete(l.refs, key)
	l.mu.Unlock()
	l.release(old)
}

func (l *listers) release(refs []objectRef) {
	for _, r := range refs {
		l.watches(r).release(r.namespace, r.name)
	}
}

func (l *listers) watches(r objectRef) *objectWatches {
	if r.secret {
		return l.secrets
	}
	return l.configMaps
}

// references lists the ConfigMaps and Secrets pod references, each once: by its
// volumes (projected ones included), its containers' env and envFrom, and its
// image pull secrets.
func references(pod *corev1.Pod) []objectRef {
	seen := map[objectRef]bool{}
	var out []objectRef
	add := func(secret bool, name string) {
		r := objectRef{secret: secret, namespace: pod.Namespace, name: name}
		if name != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(false, v.ConfigMap.Name)
		case v.Secret != nil:
			add(true, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(false, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add(true, s.Secret.Name)
				}
			}
		}
	}
	envs := func(env []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(false, r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(true, r.Name)
			}
		}
		for _, f := range from {
			if f.ConfigMapRef != nil {
				add(false, f.ConfigMapRef.Name)
			}
			if f.SecretRef != nil {
				add(true, f.SecretRef.Name)
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		envs(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.Containers {
		envs(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		envs(c.Env, c.EnvFrom)
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(true, s.Name)
	}
	return out
}

// objectWatches keep one informer per ConfigMap or Secret, selected by name, while
// someone holds it, each copying its object into store, which the lister reads.
type objectWatches struct {
	ctx         context.Context
	newInformer func(namespace, name string) cache.SharedIndexInformer
	store       cache.Indexer

	mu      sync.Mutex
	watches map[types.NamespacedName]*objectWatch
}

type objectWatch struct {
	informer cache.SharedIndexInformer
	// synced reports that the handler copying into the shared store has seen
	// the first list: the informer's own HasSynced comes before its handlers
	// have run, so a provider could miss an object that exists.
	synced cache.InformerSynced
	cancel context.CancelFunc
	refs   int
}

func newObjectWatches(ctx context.Context, newInformer func(namespace, name string) cache.SharedIndexInformer) *objectWatches {
	return &objectWatches{
		ctx: ctx, newInformer: newInformer,
		store:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		watches: map[types.NamespacedName]*objectWatch{},
	}
}

// acquire holds the object namespace/name, starting its watch if no one held it,
// and returns whether the watch has listed.
func (w *objectWatches) acquire(namespace, name string) cache.InformerSynced {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ow := w.watches[key]; ow != nil {
		ow.refs++
		return ow.synced
	}
	ow := &objectWatch{informer: w.newInformer(namespace, name), refs: 1}
	_ = ow.informer.SetTransform(informerutil.StripManagedFields)
	// Checked and applied under the lock: a late event of a watch already let
	// go of must not bring its object back.
	apply := func(change func(obj any) error, obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.watches[key] == ow {
			_ = change(obj)
		}
	}
	ow.synced = ow.informer.HasSynced
	if reg, err := ow.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { apply(w.store.Update, obj) },
		UpdateFunc: func(_, obj any) { apply(w.store.Update, obj) },
		DeleteFunc: func(obj any) { apply(w.store.Delete, obj) },
	}); err == nil {
		ow.synced = reg.HasSynced
	}
	ctx, cancel := context.WithCancel(w.ctx)
	ow.cancel = cancel
	go ow.informer.RunWithContext(ctx)
	w.watches[key] = ow
	return ow.synced
}

// release lets go of one hold of namespace/name; the last one stops its watch
// and drops its object.
func (w *objectWatches) release(namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	w.mu.Lock()
	defer w.mu.Unlock()
	ow := w.watches[key]
	if ow == nil {
		return
	}
	if ow.refs--; ow.refs > 0 {
		return
	}
	ow.cancel()
	delete(w.watches, key)
	if obj, ok, _ := w.store.GetByKey(key.String()); ok {
		_ = w.store.Delete(obj)
	}
}

// lazyInformer is an informer started by the first read of its lister.
type lazyInformer struct {
	ctx         context.Context
	what        string
	newInformer func() cache.SharedIndexInformer

	once     sync.Once
	informer cache.SharedIndexInformer
}

// indexer is the informer's store once it has listed.
func (l *lazyInformer) indexer() (cache.Indexer, error) {
	l.once.Do(func() {
		l.informer = l.newInformer()
		_ = l.informer.SetTransform(informerutil.StripManagedFields)
		go l.informer.RunWithContext(l.ctx)
	})
	if !l.informer.HasSynced() {
		ctx, cancel := context.WithTimeout(l.ctx, syncTimeout)
		defer cancel()
		if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
			return nil, fmt.Errorf("listing %s: not synced within %v", l.what, syncTimeout)
		}
	}
	return l.informer.GetIndexer(), nil
}

// podLister is corev1listers.PodLister over a lazyInformer.
type podLister struct{ l *lazyInformer }

func (p podLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	idx, err := p.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewPodLister(idx).List(selector)
}

func (p podLister) Pods(namespace string) corev1listers.PodNamespaceLister {
	return podNamespaceLister{p.l, namespace}
}

type podNamespaceLister struct {
	l         *lazyInformer
	namespace string
}

func (p podNamespaceLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	idx, err := p.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewPodLister(idx).Pods(p.namespace).List(selector)
}

func (p podNamespaceLister) Get(name string) (*corev1.Pod, error) {
	idx, err := p.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewPodLister(idx).Pods(p.namespace).Get(name)
}

// serviceLister is corev1listers.ServiceLister over a lazyInformer.
type serviceLister struct{ l *lazyInformer }

func (s serviceLister) List(selector labels.Selector) ([]*corev1.Service, error) {
	idx, err := s.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewServiceLister(idx).List(selector)
}

func (s serviceLister) Services(namespace string) corev1listers.ServiceNamespaceLister {
	return serviceNamespaceLister{s.l, namespace}
}

type serviceNamespaceLister struct {
	l         *lazyInformer
	namespace string
}

func (s serviceNamespaceLister) List(selector labels.Selector) ([]*corev1.Service, error) {
	idx, err := s.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewServiceLister(idx).Services(s.namespace).List(selector)
}

func (s serviceNamespaceLister) Get(name string) (*corev1.Service, error) {
	idx, err := s.l.indexer()
	if err != nil {
		return nil, err
	}
	return corev1listers.NewServiceLister(idx).Services(s.namespace).Get(name)
}
