package pod

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// podState is what the controller remembers about one pod key (namespace/name)
// between syncs. It is a cache of facts learned from the provider, never a second
// source of truth: after a restart it is rebuilt from GetPods.
type podState struct {
	// providerUID is the UID of the incarnation the provider runs under this key,
	// empty if the provider has none.
	providerUID types.UID
	// lastPod is the pod last accepted by CreatePod/UpdatePod (or found in the
	// provider at start), or a later API object that differs from it in nothing
	// updatable. The sync handler compares the API pod with it to decide on
	// UpdatePod, and DeletePod is called with it once the API object is gone.
	lastPod *podwire.Pod
	// notified is the latest status pushed by a PodNotifier for providerUID, until
	// it is written to the API.
	notified *corev1.PodStatus
	// env is the environment the provider started the pod with: like the kubelet's,
	// it stays fixed for the pod's life. Nil for plain providers and after a restart.
	env map[string][]corev1.EnvVar
	// volumes stands for the volume files last handed to the provider.
	volumes volumesDigest
	// echo tells the pod's status writes coming back through the watch from
	// others' changes of its status.
	echo statusEcho
	// volumesStale is set when an object the pod references changed, or one of its
	// tokens is due for refresh, since volumes were resolved.
	volumesStale bool
	// deleteRequested is set once DeletePod has succeeded for the incarnation
	// providerUID names; it is cleared whenever providerUID is set.
	deleteRequested bool
	// stopOverdue is set once the node has said (an Event) that the grace
	// period of the deleting incarnation providerUID names is over and the
	// provider has not confirmed that it stopped.
	stopOverdue bool
	// (The booleans are kept together, deleteRequested a flag rather than a
	// UID, the volumes' digest short and the rare start trace apart
	// (stateStore.startTraces), so that a pod's state fits the 80-byte size
	// class: TestAPodsStateFitsItsSizeClass.)
}

// stateStore holds the podState of every key and a lock per key, so the sync,
// status and deletion workers never talk to the provider about the same pod at once.
type stateStore struct {
	mu     sync.Mutex
	states map[string]*podState
	locks  map[string]*keyLock
	// resizes are the records of pods resized in place (resize.go), apart from
	// their podState: few pods have one, and a field would make every pod's
	// state a size class larger.
	resizes map[string]*resizeState
	// resized counts the records, read without the lock: every status write
	// looks a record up, and nearly all pods have none, so that lookup need not
	// take the store's lock, which the workers all share.
	resized atomic.Int32
	// creating are the pods whose CreatePod is in flight, by key, with the
	// status the provider notified for one meanwhile (beginCreate).
	creating map[string]*createInFlight
	// startTraces are the recorded sync spans that created pods in the
	// provider, by key, until each pod's first status write continues its
	// trace. Few pods have one (traced and sampled), and a field of 8 bytes
	// put every pod's state in the next size class (96 against 80 bytes).
	// traced counts them, read without the lock as resized is.
	startTraces map[string]trace.SpanContext
	traced      atomic.Int32
}

// createInFlight is one pod's CreatePod in flight: the incarnation created, and
// the latest status the provider notified for it before the call returned.
type createInFlight struct {
	uid      types.UID
	notified *corev1.PodStatus
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func newStateStore() *stateStore {
	return &stateStore{states: map[string]*podState{}, locks: map[string]*keyLock{}}
}

// lock takes the lock of key and returns its release function.
func (s *stateStore) lock(key string) func() {
	s.mu.Lock()
	l := s.locks[key]
	if l == nil {
		if s.locks == nil {
			s.locks = map[string]*keyLock{}
		}
		l = &keyLock{}
		s.locks[key] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(s.locks, key)
			if len(s.locks) == 0 {
				// Go keeps a map's room after its items are deleted: a burst
				// of syncs would keep it for the node's life.
				s.locks = nil
			}
		}
		s.mu.Unlock()
	}
}

// get returns a copy of the state of key (zero value if none).
func (s *stateStore) get(key string) podState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.states[key]; st != nil {
		return *st
	}
	return podState{}
}

// update applies fn to the state of key, creating it if needed.
func (s *stateStore) update(key string, fn func(*podState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[key]
	if st == nil {
		st = &podState{}
		s.states[key] = st
	}
	fn(st)
}

// updateIfExists applies fn to the state of key if there is one.
func (s *stateStore) updateIfExists(key string, fn func(*podState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.states[key]; st != nil {
		fn(st)
	}
}

// echo applies fn to the status echo of key, if key has state.
func (s *stateStore) echo(key string, fn func(*statusEcho)) {
	s.updateIfExists(key, func(st *podState) { fn(&st.echo) })
}

// notify keeps status, which the provider notified for incarnation uid of key,
// until it is written: in the pod's state if the provider runs that incarnation
// (a notice without a UID is taken for the one it runs), else with a CreatePod
// of it still in flight, since a provider may notify a pod before the call
// that creates it returns.
func (s *stateStore) notify(key string, uid types.UID, status *corev1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.states[key]; st != nil && (st.providerUID == uid || uid == "") {
		st.notified = status
		return
	}
	if cr := s.creating[key]; cr != nil && cr.uid == uid && uid != "" {
		cr.notified = status
	}
}

// beginCreate records that CreatePod of incarnation uid of key is in flight, so
// that notify keeps what the provider notifies for it meanwhile; created hands
// that to the pod's state. The caller holds key's lock until it calls the
// returned end, once the call has returned, whatever its outcome.
func (s *stateStore) beginCreate(key string, uid types.UID) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating == nil {
		s.creating = map[string]*createInFlight{}
	}
	s.creating[key] = &createInFlight{uid: uid}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.endCreateLocked(key)
	}
}

// created applies fn to the state of key, creating it if needed, once
// CreatePod has succeeded: notified is the status the provider notified while
// the call was in flight (beginCreate), nil if none. From then on notify keeps
// notices in the state.
func (s *stateStore) created(key string, fn func(st *podState, notified *corev1.PodStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var notified *corev1.PodStatus
	if cr := s.creating[key]; cr != nil {
		notified = cr.notified
	}
	s.endCreateLocked(key)
	st := s.states[key]
	if st == nil {
		st = &podState{}
		s.states[key] = st
	}
	fn(st, notified)
}

func (s *stateStore) endCreateLocked(key string) {
	delete(s.creating, key)
	if len(s.creating) == 0 {
		s.creating = nil // as locks: a burst of creates keeps no room
	}
}

// forget drops the state of key.
func (s *stateStore) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.states, key)
	s.setResizeLocked(key, nil)
	s.setStartTraceLocked(key, nil)
}

// setStartTrace keeps sc as the span that created key's pod in the provider;
// nil drops the one kept.
func (s *stateStore) setStartTrace(key string, sc *trace.SpanContext) {
	if sc == nil && s.traced.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStartTraceLocked(key, sc)
}

func (s *stateStore) setStartTraceLocked(key string, sc *trace.SpanContext) {
	if sc == nil {
		delete(s.startTraces, key)
		if len(s.startTraces) == 0 {
			s.startTraces = nil
		}
	} else {
		if s.startTraces == nil {
			s.startTraces = map[string]trace.SpanContext{}
		}
		s.startTraces[key] = *sc
	}
	s.traced.Store(int32(len(s.startTraces)))
}

// takeStartTrace returns the span that created key's pod in the provider, and
// drops it: nil if there is none.
func (s *stateStore) takeStartTrace(key string) *trace.SpanContext {
	if s.traced.Load() == 0 {
		// One for key is set under key's lock, which the caller holds.
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.startTraces[key]
	if !ok {
		return nil
	}
	s.setStartTraceLocked(key, nil)
	return &sc
}

// keys returns the keys with state.
func (s *stateStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.states))
	for k := range s.states {
		out = append(out, k)
	}
	return out
}

// resizeOf returns the resize record of key (nil if none): records are never
// changed, so it may be read after the lock is released.
func (s *stateStore) resizeOf(key string) *resizeState {
	if s.resized.Load() == 0 {
		// A record of key is set under key's lock, which the caller holds.
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resizes[key]
}

// setResize keeps rs as the resize record of key; nil drops it.
func (s *stateStore) setResize(key string, rs *resizeState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setResizeLocked(key, rs)
}

func (s *stateStore) setResizeLocked(key string, rs *resizeState) {
	if rs == nil {
		delete(s.resizes, key)
		if len(s.resizes) == 0 {
			s.resizes = nil
		}
		s.resized.Store(int32(len(s.resizes)))
		return
	}
	if s.resizes == nil {
		s.resizes = map[string]*resizeState{}
	}
	s.resizes[key] = rs
	s.resized.Store(int32(len(s.resizes)))
}

func keyOf(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
