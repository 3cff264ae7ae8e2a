package pod

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// WatchScope is what a node with a pod watch of its own (a Controller without a
// Source) asks the API server to send it.
//
// The API server keeps a watch selected by node name (spec.nodeName=<node>) in
// an index and gives it a buffer of 10 events, sized for a kubelet's hundred
// pods; when the buffer is full for a moment it closes the watch, and the
// reflector watches again from the last resource version. A virtual node taking
// hundreds of pods a second fills it many times a burst, and each time its
// events wait: in single runs of 10,000 pods on two cores, 91 and 96 % of the
// bench's ceiling with create→Running p50 6.2 and 4.4 s, against 107 and 108 %
// and 1.3 and 1.4 s with a watch of every bound pod, which the API server gives
// a buffer of up to 1000 (docs/PERFORMANCE.md).
type WatchScope string

const (
	// WatchNodePods lists and watches the node's pods only, as the kubelet does.
	// The Node authorizer allows a node identity (system:node:<name>) nothing
	// else. It is the zero value's meaning.
	WatchNodePods WatchScope = "node"
	// WatchBoundPods lists the node's pods, then watches the changes of every pod
	// bound to a node (spec.nodeName set) and keeps the node's. The other nodes'
	// events cost the watch's bandwidth and a decode each, and are dropped; the
	// list, which would cost the most, stays the node's. It needs list and
	// watch of pods in every namespace, which RBAC cannot grant apart from the
	// node-scoped watch anyway.
	WatchBoundPods WatchScope = "bound"
	// WatchAuto is WatchBoundPods while the API server allows it, and
	// WatchNodePods from the first watch it refuses (Forbidden: a credential
	// that may watch the node's pods only).
	WatchAuto WatchScope = "auto"
)

// boundSelector selects the pods bound to any node.
var boundSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()

// nodePodsListWatch returns what the pod informer of node lists and watches
// with, for scope.
func nodePodsListWatch(client kubernetes.Interface, raw *podwire.Client, node string, scope WatchScope, logger *slog.Logger) (cache.ListerWatcher, error) {
	own := podwire.ListWatch(client, raw, fields.OneTermEqualSelector("spec.nodeName", node).String())
	switch scope {
	case "", WatchNodePods:
		return own, nil
	case WatchBoundPods, WatchAuto:
		return &boundPodsListWatch{own: cache.ToListerWatcherWithContext(own),
			bound: cache.ToListerWatcherWithContext(podwire.ListWatch(client, raw, boundSelector)),
			node:  node, narrowIfRefused: scope == WatchAuto, logger: logger}, nil
	}
	return nil, fmt.Errorf("unknown pod watch scope %q (want %q, %q or %q)", scope, WatchNodePods, WatchBoundPods, WatchAuto)
}

// boundPodsListWatch lists a node's pods through list and watches through
// watch, which sends the events of every bound pod, passing on the node's.
//
// Pods are bound once and never to another node, so a pod's events are the
// node's exactly when it names the node: the informer sees what the node-scoped
// watch would have sent. Bookmarks pass too, so that the resource version the
// reflector resumes from keeps up while only other nodes' pods change.
type boundPodsListWatch struct {
	// own lists and watches the node's pods; bound watches every bound pod.
	own, bound cache.ListerWatcherWithContext
	node       string
	// narrowIfRefused makes a refused watch of every bound pod a watch of the
	// node's pods, from then on (narrowed).
	narrowIfRefused bool
	narrowed        atomic.Bool
	logger          *slog.Logger
}

func (lw *boundPodsListWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), o)
}

func (lw *boundPodsListWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), o)
}

func (lw *boundPodsListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return lw.own.ListWithContext(ctx, o)
}

func (lw *boundPodsListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if lw.narrowed.Load() {
		return lw.own.WatchWithContext(ctx, o)
	}
	w, err := lw.bound.WatchWithContext(ctx, o)
	if apierrors.IsForbidden(err) && lw.narrowIfRefused {
		lw.narrowed.Store(true)
		lw.logger.Info("not allowed to watch every bound pod; watching the node's pods only", "reason", err)
		return lw.own.WatchWithContext(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, lw.keep), nil
}

// IsWatchListSemanticsUnSupported keeps the reflector to a list and a watch
// from its resource version: a streamed list would come through the watch of
// every bound pod, which is what the node's own list is there to spare.
func (lw *boundPodsListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// keep passes on the node's pods' events, bookmarks and errors.
func (lw *boundPodsListWatch) keep(e watch.Event) (watch.Event, bool) {
	if e.Type == watch.Bookmark || e.Type == watch.Error {
		return e, true
	}
	node, ok := boundNode(e.Object)
	return e, !ok || node == lw.node // not a pod: the reflector says what is wrong
}

// boundNode is the node a pod read encoded or decoded is bound to.
func boundNode(obj runtime.Object) (string, bool) {
	switch p := obj.(type) {
	case *podwire.RawPod:
		return p.NodeName(), true
	case *corev1.Pod:
		return p.Spec.NodeName, true
	}
	return "", false
}
