package upstream

import (
	"context"
	"errors"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// Controller is what a provider's own main hands upstream's node package when
// it does without nodeutil (interLink's virtual kubelet, for one): the pod
// handler it gives node.NewPodController, the NodeProvider and Node it gives
// node.NewNodeController, and the routes it gives api.AttachPodRoutes.
type Controller struct {
	// Pods is PodControllerConfig.Provider. If it is a node.PodNotifier, its
	// notifications are the pods' statuses, as upstream's pod controller took them.
	Pods node.PodLifecycleHandler
	// NodeProvider pings and notifies the node's status; nil: always Ready.
	NodeProvider node.NodeProvider
	// Node is the Node the main registers: what it sets (labels, annotations,
	// taints, capacity, conditions, addresses, node info) configures vkubelet's
	// node, as New carries what a NewProviderFunc set. nil: nothing.
	Node *corev1.Node
	// Routes serve the kubelet API's logs, exec, attach, port-forward, stats
	// summary and resource metrics; a nil handler is answered NotImplemented.
	// GetPods, GetPodsFromKubernetes and the stream timeouts are vkubelet's own.
	Routes api.PodHandlerConfig
}

// WrapController adapts a provider that a main drives through upstream's node
// package directly. Its handler's methods, notifications and routes are used
// as Wrap uses a nodeutil.Provider's.
func WrapController(cfg Config, c Controller) (provider.PodLifecycleHandler, error) {
	if c.Pods == nil {
		return nil, errors.New("upstream provider: Controller.Pods is required")
	}
	a, err := adapt(cfg, routed{c.Pods, c.Routes}, c.NodeProvider)
	if err != nil {
		return nil, err
	}
	if c.Node != nil {
		a.node = c.Node.DeepCopy()
	}
	return a.withNotifier(), nil
}

// routed is a pod handler with a main's routes, seen as a nodeutil.Provider.
type routed struct {
	node.PodLifecycleHandler
	routes api.PodHandlerConfig
}

// NotifyPods forwards to the handler, if it notifies; the adapter asks only
// then (see notifies).
func (r routed) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	if n, ok := r.PodLifecycleHandler.(node.PodNotifier); ok {
		n.NotifyPods(ctx, notify)
	}
}

func (r routed) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	if r.routes.GetContainerLogs == nil {
		return nil, errdefs.NotImplemented("the provider serves no logs")
	}
	return r.routes.GetContainerLogs(ctx, namespace, pod, container, opts)
}

func (r routed) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach api.AttachIO) error {
	if r.routes.RunInContainer == nil {
		return errdefs.NotImplemented("the provider serves no exec")
	}
	return r.routes.RunInContainer(ctx, namespace, pod, container, cmd, attach)
}

func (r routed) AttachToContainer(ctx context.Context, namespace, pod, container string, attach api.AttachIO) error {
	if r.routes.AttachToContainer == nil {
		return errdefs.NotImplemented("the provider serves no attach")
	}
	return r.routes.AttachToContainer(ctx, namespace, pod, container, attach)
}

func (r routed) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	if r.routes.GetStatsSummary == nil {
		return nil, errdefs.NotImplemented("the provider serves no stats summary")
	}
	return r.routes.GetStatsSummary(ctx)
}

func (r routed) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	if r.routes.GetMetricsResource == nil {
		return nil, errdefs.NotImplemented("the provider serves no resource metrics")
	}
	return r.routes.GetMetricsResource(ctx)
}

func (r routed) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	if r.routes.PortForward == nil {
		return errdefs.NotImplemented("the provider serves no port-forward")
	}
	return r.routes.PortForward(ctx, namespace, pod, port, stream)
}

// notifies reports whether p pushes pod statuses: is a node.PodNotifier, or
// for a main's handler, has one.
func notifies(p any) bool {
	if r, ok := p.(routed); ok {
		p = r.PodLifecycleHandler
	}
	_, ok := p.(node.PodNotifier)
	return ok
}
