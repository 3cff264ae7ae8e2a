package pod

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/cacheutil"
)

// Source is one pod watch for all the nodes of a process. A process that runs a
// thousand virtual nodes would otherwise open a thousand watches, each with its
// reflector, queue and decoder; a Source opens one, of every pod bound to a node
// (spec.nodeName set: field selectors cannot name a set of nodes), keeps them as
// cachedPods indexed by node, and hands each node's events to the Controller of
// that node. Pods of nodes without a Controller are cached and not handled, so a
// node that starts later (a NodeSet grows, a replica takes a node over) finds its
// pods already there.
//
// The cost is a cached pod per pod bound anywhere in the cluster, its protobuf
// encoding (well under 1 KiB); a process with one node watches its own pods only
// (a Controller without a Source).
type Source struct {
	informer cache.SharedIndexInformer

	mu sync.RWMutex
	// handlers are the Controllers' event handlers by node name.
	handlers map[string]cache.ResourceEventHandler
}

// byNode indexes cachedPods by the node they are bound to.
const byNode = "node"

// NewSource builds the watch of pods bound to any node; nothing runs until Run.
// resync re-delivers every pod to its node's Controller this often (0: never).
func NewSource(client kubernetes.Interface, resync time.Duration) (*Source, error) {
	bound := fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	lw := cacheutil.ListWatchOf(client, client.CoreV1().Pods(metav1.NamespaceAll), func(o *metav1.ListOptions) { o.FieldSelector = bound })
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, cache.Indexers{byNode: nodeIndex})
	if err := informer.SetTransform(compactTransform); err != nil {
		return nil, fmt.Errorf("pod source: %w", err)
	}
	s := &Source{informer: informer, handlers: map[string]cache.ResourceEventHandler{}}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if h := s.handler(obj); h != nil {
				h.OnAdd(obj, false)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if h := s.handler(newObj); h != nil {
				h.OnUpdate(oldObj, newObj)
			}
		},
		DeleteFunc: func(obj any) {
			if h := s.handler(obj); h != nil {
				h.OnDelete(obj)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pod source: %w", err)
	}
	return s, nil
}

// Run watches pods until ctx ends.
func (s *Source) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// nodeIndex is the byNode index function.
func nodeIndex(obj any) ([]string, error) {
	if p, ok := obj.(*cachedPod); ok {
		return []string{p.NodeName}, nil
	}
	return nil, nil
}

// handler returns the handler of the node obj is bound to, nil if none. A
// tombstone carries the last cachedPod the informer had, which names the node.
func (s *Source) handler(obj any) cache.ResourceEventHandler {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*cachedPod)
	if !ok {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.handlers[p.NodeName]
}

// register makes h the handler of node's pods, until the returned function is
// called, and hands it the pods already cached, as an informer does for a handler
// added late.
//
// The replay holds the lock that event delivery takes: an event of the node's
// pods is delivered before the replay (and dropped, the replay covering it, as
// the cache is written before events are delivered) or after it.
func (s *Source) register(node string, h cache.ResourceEventHandler) (unregister func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := s.handlers[node]; taken {
		return nil, fmt.Errorf("pod source: node %s already has a running pod controller", node)
	}
	s.handlers[node] = h
	objs, _ := s.informer.GetIndexer().ByIndex(byNode, node)
	for _, obj := range objs {
		h.OnAdd(obj, true)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.handlers, node)
	}, nil
}
