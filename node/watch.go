package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
)

// Watch is one watch of Node objects for all the nodes of a process, in place of
// one per node: a Controller needs to hear of its Node only when it is deleted,
// replaced, marked not Ready by someone else or marked for removal. It keeps of
// each Node its name, UID, Ready condition and removal mark (nodeSummary),
// whatever the Node's size, and hands each change to the Controller of that
// node, if the process runs one.
type Watch struct {
	informer cache.SharedIndexInformer
	// router hands each Node's changes to its Controller.
	router *informerutil.Router
}

// NewWatch builds the watch; nothing runs until Run.
func NewWatch(client kubernetes.Interface) (*Watch, error) {
	lw := informerutil.ListWatchOf(client, client.CoreV1().Nodes(), nil)
	informer := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	if err := informer.SetTransform(slimNode); err != nil {
		return nil, fmt.Errorf("node watch: %w", err)
	}
	w := &Watch{informer: informer, router: informerutil.NewRouter(nodeName)}
	if _, err := informer.AddEventHandler(w.router.Handler()); err != nil {
		return nil, fmt.Errorf("node watch: %w", err)
	}
	return w, nil
}

// Run watches Nodes until ctx ends.
func (w *Watch) Run(ctx context.Context) { w.informer.RunWithContext(ctx) }

// nodeSummary is what a Controller reads of a Node, and all the watch keeps of
// one: a corev1.Node, even emptied, is about a KiB of struct.
type nodeSummary struct {
	Name, ResourceVersion string
	UID                   types.UID
	// Ready is the status of the Node's Ready condition, "" without one.
	Ready corev1.ConditionStatus
	// Removing: the Node is marked for removal (BeingRemoved).
	Removing bool
}

var (
	_ runtime.Object            = &nodeSummary{}
	_ metav1.ObjectMetaAccessor = &nodeSummary{}
)

// GetObjectMeta gives the informer (keys, resource versions) a metav1.Object,
// made per call since it is short-lived.
func (n *nodeSummary) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}
}

// GetObjectKind implements runtime.Object; a nodeSummary is never serialized.
func (n *nodeSummary) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (n *nodeSummary) DeepCopyObject() runtime.Object {
	out := *n
	return &out
}

// slimNode is the node informers' transform: each Node is kept, and handed to
// the handlers, as a *nodeSummary. Anything else (a tombstone carries an object
// already transformed) passes unchanged.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &nodeSummary{Name: n.Name, ResourceVersion: n.ResourceVersion, UID: n.UID, Ready: readyStatus(n), Removing: BeingRemoved(n)}, nil
}

// nodeName is the name of a Node, or of a tombstone's (Nodes have no
// namespace: the key is the name).
func nodeName(obj any) (string, bool) {
	switch o := obj.(type) {
	case *nodeSummary:
		return o.Name, true
	case cache.DeletedFinalStateUnknown:
		return o.Key, true
	}
	return "", false
}

// register makes h the handler of node's changes until the returned function is
// called. (A Controller needs no replay: it reads its Node when it starts.)
func (w *Watch) register(node string, h cache.ResourceEventHandler) (unregister func(), err error) {
	return w.router.Register(node, h, nil)
}

// readyStatus is the status of n's Ready condition, "" without one.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
