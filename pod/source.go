package pod

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
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
// encoding (well under 1 KiB); a process with one node caches its own pods only
// (a Controller without a Source, which lists its own pods and, as WatchScope
// says, watches its own or every bound pod, keeping its own).
type Source struct {
	informer cache.SharedIndexInformer
	// rawPods is what the Source reads with, if not client-go's fakes; a
	// Controller with the same client shares it (a REST client of its own
	// costs a node about a KiB).
	rawPods *podwire.Client
	// router hands each node's events to its Controller.
	router *informerutil.Router
}

// byNode indexes cachedPods by the node they are bound to.
const byNode = "node"

// NewSource builds the watch of pods bound to any node; nothing runs until Run.
// resync re-delivers every pod to its node's Controller this often (0: never).
func NewSource(client kubernetes.Interface, resync time.Duration) (*Source, error) {
	raw, _ := podwire.NewClient(client)
	informer := podwire.NewInformer(podwire.ListWatch(client, raw, boundSelector), raw, resync, cache.Indexers{byNode: nodeIndex})
	if err := informer.SetTransform(podwire.TransformOf(informer.GetIndexer())); err != nil {
		return nil, fmt.Errorf("pod source: %w", err)
	}
	s := &Source{informer: informer, router: informerutil.NewRouter(podNode), rawPods: raw}
	if _, err := informer.AddEventHandler(s.router.Handler()); err != nil {
		return nil, fmt.Errorf("pod source: %w", err)
	}
	return s, nil
}

// Run watches pods until ctx ends.
func (s *Source) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// nodeIndex is the byNode index function.
func nodeIndex(obj any) ([]string, error) {
	if p, ok := obj.(*podwire.Pod); ok {
		return []string{p.NodeName}, nil
	}
	return nil, nil
}

// podNode is the node a podwire.Pod is bound to. A tombstone carries the last
// podwire.Pod the informer had, which names it.
func podNode(obj any) (string, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*podwire.Pod)
	if !ok {
		return "", false
	}
	return p.NodeName, true
}

// register makes h the handler of node's pods, until the returned function is
// called, and hands it the pods already cached, as an informer does for a handler
// added late.
func (s *Source) register(node string, h cache.ResourceEventHandler) (unregister func(), err error) {
	return s.router.Register(node, h, func(h cache.ResourceEventHandler) {
		objs, _ := s.informer.GetIndexer().ByIndex(byNode, node)
		for _, obj := range objs {
			h.OnAdd(obj, true)
		}
	})
}
