package node

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/cacheutil"
)

// Watch is one watch of Node objects for all the nodes of a process, in place of
// one per node: a Controller needs to hear of its Node only when it is deleted,
// replaced or marked not Ready by someone else. It keeps of each Node its name,
// UID and Ready condition, a few hundred bytes however large the Node, and hands
// each change to the Controller of that node, if the process runs one.
type Watch struct {
	informer cache.SharedIndexInformer

	mu       sync.RWMutex
	handlers map[string]cache.ResourceEventHandler
}

// NewWatch builds the watch; nothing runs until Run.
func NewWatch(client kubernetes.Interface) (*Watch, error) {
	lw := cacheutil.ListWatchOf(client, client.CoreV1().Nodes(), nil)
	informer := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	if err := informer.SetTransform(slimNode); err != nil {
		return nil, fmt.Errorf("node watch: %w", err)
	}
	w := &Watch{informer: informer, handlers: map[string]cache.ResourceEventHandler{}}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			if h := w.handler(newObj); h != nil {
				h.OnUpdate(oldObj, newObj)
			}
		},
		DeleteFunc: func(obj any) {
			if h := w.handler(obj); h != nil {
				h.OnDelete(obj)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("node watch: %w", err)
	}
	return w, nil
}

// Run watches Nodes until ctx ends.
func (w *Watch) Run(ctx context.Context) { w.informer.RunWithContext(ctx) }

// slimNode is the watch's transform: what a Controller reads of a Node.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}
	if s := readyStatus(n); s != "" {
		out.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}
	}
	return out, nil
}

// handler returns the handler of the Node obj is, nil if none.
func (w *Watch) handler(obj any) cache.ResourceEventHandler {
	name := ""
	switch o := obj.(type) {
	case *corev1.Node:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		name = o.Key // Nodes have no namespace: the key is the name
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[name]
}

// register makes h the handler of node's changes until the returned function is
// called.
func (w *Watch) register(node string, h cache.ResourceEventHandler) (unregister func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, taken := w.handlers[node]; taken {
		return nil, fmt.Errorf("node watch: node %s already has a running controller", node)
	}
	w.handlers[node] = h
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.handlers, node)
	}, nil
}
