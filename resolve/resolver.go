package resolve

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/provider"
)

// Config configures a Resolver. Client and NodeName are required.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// Recorder records the Events of skipped optional references and missing pull
	// secrets (once per pod); nil records none.
	Recorder record.EventRecorder
	// OnChange is called with a pod's key (namespace/name) when an object the pod
	// referenced at its last resolution is added, changed or deleted, and when a
	// service-account token it was given is due for refresh. It must not block.
	OnChange func(podKey string)
	// TokenCheckInterval is how often tokens are checked for refresh. Default 30s.
	TokenCheckInterval time.Duration
	// SyncTimeout bounds the wait for the caches of a namespace new to the node.
	// Default 30s.
	SyncTimeout time.Duration
	// Clock drives token refresh; nil means the real clock.
	Clock  clock.WithTicker
	Logger *slog.Logger
	// Caches, if set, are the caches of referenced objects this resolver shares
	// with the other nodes of the process; nil makes the resolver its own.
	Caches *Caches
}

// Resolver resolves the pods of one node. Its caches hold the ConfigMaps, Secrets
// and Services of the namespaces that have pods being resolved, and the Services of
// `default`; Release drops a pod's share of them. All methods are safe for
// concurrent use, but one pod must not be resolved and released concurrently.
type Resolver struct {
	client   kubernetes.Interface
	nodeName string
	recorder record.EventRecorder
	onChange func(string)
	clock    clock.WithTicker
	log      *slog.Logger

	checkInterval time.Duration
	// checks are what Start runs and Stop ends.
	checks struct {
		mu      sync.Mutex
		delayed clock.WithDelayedExecution
		timer   clock.Timer
		stopped bool
		// cancel ends Run, which Start runs with a clock without timers.
		cancel context.CancelFunc
	}
	// lastTokenCheck and refreshBudget pace token refreshes (checkTokens);
	// guarded by mu.
	lastTokenCheck time.Time
	refreshBudget  float64
	syncTimeout    time.Duration

	// caches run the informers the resolver's stores use.
	caches *Caches

	mu sync.Mutex
	// stores are the informers by kind and namespace, shared and refcounted by pods.
	stores map[storeKey]*store
	// closed is set once Run has returned and the caches were given back.
	closed bool
	// pods are the resolved pods: what they hold and reference.
	pods podIndex
	// lastObjects is the last pod's list of referenced objects, which the
	// next pod with an equal list shares (setObjectsLocked).
	lastObjects *[]objectKey
}

type kind string

const (
	kindConfigMap kind = "ConfigMap"
	kindSecret    kind = "Secret"
	kindService   kind = "Service"
)

type objectKey struct {
	kind            kind
	namespace, name string
}

// podRefs is what the resolver keeps about one pod key.
type podRefs struct {
	uid types.UID
	// The pod uses the stores of storesFor(its namespace) and those of the
	// ConfigMaps and Secrets among objects, which it holds a reference to:
	// a list shared by the pods that reference the same objects, never
	// changed (setObjectsLocked); nil for none.
	objects *[]objectKey
	// recorded are the Event messages already recorded for uid (nil: none).
	recorded map[string]bool
	// tokens are the service-account tokens handed out for uid, to reuse and
	// refresh.
	tokens podTokens
	// (The list a pointer, the first token inline: a pod's records fit the
	// 112-byte size class, where a podRefs and its one token took 144.)
}

// objectList is the objects p references.
func (p *podRefs) objectList() []objectKey {
	if p.objects == nil {
		return nil
	}
	return *p.objects
}

// namespaceOf is the namespace of a pod key.
func namespaceOf(podKey string) string {
	ns, _, _ := strings.Cut(podKey, "/")
	return ns
}

// New builds a resolver. Its caches start on demand; Run (or Start, until Stop)
// refreshes tokens, and its end gives the caches back.
func New(cfg Config) (*Resolver, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("resolver: Client and NodeName are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(string) {}
	}
	if cfg.TokenCheckInterval <= 0 {
		cfg.TokenCheckInterval = 30 * time.Second
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 30 * time.Second
	}
	if cfg.Caches == nil {
		cfg.Caches = NewCaches(cfg.Client)
	}
	return &Resolver{
		client: cfg.Client, nodeName: cfg.NodeName, recorder: cfg.Recorder, onChange: cfg.OnChange,
		clock: cfg.Clock, log: cfg.Logger.With("component", "resolver", "node", cfg.NodeName),
		checkInterval: cfg.TokenCheckInterval, syncTimeout: cfg.SyncTimeout,
		caches: cfg.Caches,
		stores: map[storeKey]*store{}, pods: podIndex{},
	}, nil
}

// Start does what Run does without a goroutine waiting for the next check,
// until Stop: a timer calls each check and arms the next. A process running a
// thousand nodes saves a thousand goroutines, and a context.AfterFunc each (some
// 500 bytes with the parent's record of it) by being told to stop rather than
// watching a context. With a clock that has no AfterFunc, it runs Run in a
// goroutine.
func (r *Resolver) Start() {
	delayed, ok := r.clock.(clock.WithDelayedExecution)
	r.checks.mu.Lock()
	defer r.checks.mu.Unlock()
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		r.checks.cancel = cancel
		go r.Run(ctx)
		return
	}
	r.checks.delayed = delayed
	r.armLocked()
}

// armLocked sets the timer of the next token check.
func (r *Resolver) armLocked() {
	r.checks.timer = r.checks.delayed.AfterFunc(r.checkInterval, func() {
		// In a goroutine of its own: a fake clock calls this while it holds
		// its lock, and the check reads the clock.
		go r.timedCheck()
	})
}

// timedCheck is a check Start's timer called for: unless stopped meanwhile, it
// checks the tokens and arms the next.
func (r *Resolver) timedCheck() {
	r.checks.mu.Lock()
	stopped := r.checks.stopped
	r.checks.mu.Unlock()
	if stopped {
		return
	}
	r.checkTokens()
	r.checks.mu.Lock()
	defer r.checks.mu.Unlock()
	if !r.checks.stopped {
		r.armLocked()
	}
}

// Stop ends the checks Start started and gives back every cache; a check
// running meanwhile is the last.
func (r *Resolver) Stop() {
	r.checks.mu.Lock()
	r.checks.stopped = true
	if r.checks.timer != nil {
		r.checks.timer.Stop()
	}
	cancel := r.checks.cancel
	r.checks.mu.Unlock()
	if cancel != nil {
		cancel() // Run gives the caches back as it returns
		return
	}
	r.stop()
}

// Run checks tokens for refresh until ctx ends, then gives every cache back
// (stopping those no other resolver uses).
func (r *Resolver) Run(ctx context.Context) {
	defer r.stop()
	t := r.clock.NewTicker(r.checkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			r.checkTokens()
		}
	}
}

// stop gives every cache back; later resolutions get caches that never sync.
func (r *Resolver) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.stores {
		s.release()
		delete(r.stores, k)
	}
	r.closed = true
}

// Resolve builds everything a provider needs to run pod: environment, volume files
// (tokens requested) and pull credentials. A missing mandatory reference is a
// *MissingError; the pod is then notified through OnChange once it appears.
func (r *Resolver) Resolve(ctx context.Context, pod *corev1.Pod) (*provider.ResolvedPod, error) {
	return r.resolve(ctx, pod, everything)
}

// ResolveVolumes builds only the volume files of pod (tokens requested): what a
// running pod's mounts would show now.
func (r *Resolver) ResolveVolumes(ctx context.Context, pod *corev1.Pod) (map[string]*provider.VolumeContents, error) {
	rp, err := r.resolve(ctx, pod, parts{volumes: true, tokens: true})
	if err != nil {
		return nil, err
	}
	return rp.Volumes, nil
}

// Check verifies that every mandatory reference of pod resolves, without requesting
// tokens: for providers that take plain pods.
func (r *Resolver) Check(ctx context.Context, pod *corev1.Pod) error {
	_, err := r.resolve(ctx, pod, parts{env: true, volumes: true, pull: true})
	return err
}

// Release forgets the pod with this key: its share of the caches, its references
// and its tokens.
func (r *Resolver) Release(podKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods.get(podKey)
	if p == nil {
		return
	}
	r.setObjectsLocked(p, nil)
	for _, k := range storesFor(namespaceOf(podKey)) {
		r.unrefStoreLocked(k)
	}
	r.pods.remove(podKey)
}

func (r *Resolver) resolve(ctx context.Context, pod *corev1.Pod, what parts) (*provider.ResolvedPod, error) {
	stores, err := r.acquire(ctx, pod)
	if err != nil {
		return nil, err
	}
	src := &cacheSource{r: r, ctx: ctx, stores: stores}
	rp, notes, err := resolvePod(pod, src, what)

	r.mu.Lock()
	p := r.pods.of(pod.Namespace, pod.Name)
	if p != nil {
		r.setObjectsLocked(p, src.touched)
	}
	// The pod holds its own references now; the resolution's go.
	for k := range src.held {
		r.unrefStoreLocked(k)
	}
	var record []note
	for _, n := range notes {
		if p != nil && !p.recorded[n.Message] {
			if p.recorded == nil {
				p.recorded = map[string]bool{}
			}
			p.recorded[n.Message] = true
			record = append(record, n)
		}
	}
	r.mu.Unlock()
	if r.recorder != nil {
		for _, n := range record {
			r.recorder.Event(pod, n.Type, n.Reason, n.Message)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return rp, nil
}

// acquire makes sure the caches the pod needs run and have synced, and counts the
// pod as one of their users.
func (r *Resolver) acquire(ctx context.Context, pod *corev1.Pod) (map[storeKey]*store, error) {
	needed := storesFor(pod.Namespace)
	r.mu.Lock()
	p := r.pods.of(pod.Namespace, pod.Name)
	if p != nil && p.uid != pod.UID {
		// Another incarnation of the name: it starts afresh.
		r.setObjectsLocked(p, nil)
		for _, k := range needed {
			r.unrefStoreLocked(k)
		}
		p = nil
	}
	if p == nil {
		p = &podRefs{uid: pod.UID} // recorded is made on the first Event: most pods have none
		r.pods.put(pod.Namespace, pod.Name, p)
		for _, k := range needed {
			r.refStoreLocked(k)
		}
	}
	stores := make(map[storeKey]*store, len(needed))
	for _, k := range needed {
		stores[k] = r.stores[k]
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, r.syncTimeout)
	defer cancel()
	for k, s := range stores {
		if err := waitSynced(ctx, s.synced); err != nil {
			return nil, fmt.Errorf("waiting for the %s cache of namespace %s: %w", k.kind, k.namespace, err)
		}
	}
	return stores, nil
}

// setObjectsLocked replaces the objects pod p references, and with them its
// references to the caches of single ConfigMaps and Secrets.
func (r *Resolver) setObjectsLocked(p *podRefs, objects []objectKey) {
	objects = uniqueObjects(objects)
	// Most pods of a node reference the same objects (kube-root-ca.crt): they
	// share one list, never changed once set, rather than keep one each.
	var list *[]objectKey
	if len(objects) > 0 {
		if r.lastObjects != nil && slices.Equal(objects, *r.lastObjects) {
			list = r.lastObjects
		} else {
			list = &objects
			r.lastObjects = list
		}
	}
	for _, o := range objects {
		if o.kind != kindService {
			r.refStoreLocked(storeOf(o))
		}
	}
	for _, o := range p.objectList() {
		if o.kind != kindService {
			r.unrefStoreLocked(storeOf(o))
		}
	}
	p.objects = list
}

// uniqueObjects is objects without repeats, in a slice of its own (a pod reads an
// object once per reference to it).
func uniqueObjects(objects []objectKey) []objectKey {
	if len(objects) == 0 {
		return nil
	}
	out := make([]objectKey, 0, len(objects))
	for _, o := range objects {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return slices.Clip(out)
}

// objectChanged tells OnChange about the pods that reference o.
//
// It looks through every pod of the node rather than keep an index from objects
// to pods: objects change seldom (a ConfigMap edited, kube-root-ca.crt rotated),
// while the index cost about 100 bytes a pod for the pod's whole life (in a
// probe of 200 nodes with 10 token pods each). Most pods share one list of
// objects (setObjectsLocked), which is looked through once: a list is told
// by its address, as lists are shared whole or made anew, never changed.
func (r *Resolver) objectChanged(o objectKey) {
	r.mu.Lock()
	var keys []string
	var lastList *[]objectKey
	var lastHas bool
	for n, p := range r.pods.all() {
		if p.objects == nil {
			continue
		}
		if p.objects != lastList {
			lastList, lastHas = p.objects, slices.Contains(*p.objects, o)
		}
		if lastHas {
			keys = append(keys, n.key())
		}
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.onChange(k)
	}
}

// cacheSource reads from the resolver's caches and records what it was asked for.
type cacheSource struct {
	r   *Resolver
	ctx context.Context
	// stores are the Service caches the pod's namespace uses, acquired and synced.
	stores map[storeKey]*store
	// held are the caches of single objects this resolution started or joined,
	// each with a reference it gives back when it ends.
	held    map[storeKey]*store
	touched []objectKey
}

// get reads a ConfigMap or Secret from its own cache, started (and waited for)
// the first time a pod of the node references it.
func (s *cacheSource) get(k kind, namespace, name string) (any, error) {
	// Kept for the pod's life (podRefs.objects): one copy of the names for all
	// the pods that reference the object, not one each.
	o := objectKey{k, unique.Make(namespace).Value(), unique.Make(name).Value()}
	s.touched = append(s.touched, o)
	sk := storeOf(o)
	st := s.held[sk]
	if st == nil {
		s.r.mu.Lock()
		st = s.r.refStoreLocked(sk)
		s.r.mu.Unlock()
		if s.held == nil {
			s.held = map[storeKey]*store{}
		}
		s.held[sk] = st
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.r.syncTimeout)
	defer cancel()
	if err := waitSynced(ctx, st.synced); err != nil {
		return nil, fmt.Errorf("waiting for the cache of %s %s/%s: %w", k, namespace, name, err)
	}
	obj, ok, err := st.informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, err
	}
	return obj, nil
}

func (s *cacheSource) configMap(namespace, name string) (*corev1.ConfigMap, error) {
	obj, err := s.get(kindConfigMap, namespace, name)
	if obj == nil {
		return nil, err
	}
	return obj.(*corev1.ConfigMap), nil
}

func (s *cacheSource) configMapBytes(cm *corev1.ConfigMap, key, value string) []byte {
	return s.r.caches.configMapBytes.get(cm, key, value)
}

func (s *cacheSource) secret(namespace, name string) (*corev1.Secret, error) {
	obj, err := s.get(kindSecret, namespace, name)
	if obj == nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

func (s *cacheSource) serviceEnv(podNamespace string, links bool, services []*corev1.Service) *envList {
	return s.r.caches.svcEnv.get(podNamespace, links, services)
}

func (s *cacheSource) services(namespace string) ([]*corev1.Service, error) {
	st := s.stores[storeKey{kind: kindService, namespace: namespace}]
	if st == nil {
		return nil, fmt.Errorf("no Service cache for namespace %s", namespace)
	}
	var out []*corev1.Service
	for _, obj := range st.informer.GetIndexer().List() {
		out = append(out, obj.(*corev1.Service))
	}
	return out, nil
}

func (s *cacheSource) node() (*corev1.Node, error) {
	return s.r.client.CoreV1().Nodes().Get(s.ctx, s.r.nodeName, metav1.GetOptions{})
}

func (s *cacheSource) token(pod *corev1.Pod, audience string, expirationSeconds *int64) ([]byte, error) {
	return s.r.token(s.ctx, pod, audience, expirationSeconds)
}
