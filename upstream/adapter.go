package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// Config is what the adapter needs besides the upstream provider.
type Config struct {
	// NodeName names the node; the Node a NewProviderFunc is handed bears it.
	NodeName string
	// InternalIP, if set, is the node's address on the Node a NewProviderFunc is
	// handed, as upstream's command gave its providers the node's address.
	InternalIP string
	// Client reads what the ProviderConfig listers serve (New only). The node's
	// own credential is enough: the listers read only what the Node authorizer
	// lets a node read.
	Client kubernetes.Interface
	// Serialize calls the provider's pod methods, stats and metrics one at a
	// time, for providers not safe for concurrent calls, as upstream's own mock
	// (its pods in a map without a lock). Streams (logs, exec, attach,
	// port-forward) and Ping are never serialized: they would hold up the rest.
	Serialize bool
	// StatusFromNotifications keeps the last pod a notifying provider reported,
	// to answer for the provider when its GetPod or GetPodStatus fails with
	// another error than NotFound: for a provider that, as upstream's pod
	// controller allowed, reports its pods only by notification (interLink's
	// virtual kubelet answers both with an error). It costs a copy of each
	// pod, so it is off unless asked for. A deleted pod whose last
	// notification never showed a container running or ended is answered for
	// as NotFound (stopped) a minute past its grace period (notified.get).
	StatusFromNotifications bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// New builds the upstream provider with newProvider, as nodeutil.NewNode would,
// and adapts it. newProvider is handed the listers (see the package doc) and a
// Node to configure; what it sets on that Node, vkubelet's node gets from the
// adapter's ConfigureNode. A nil NodeProvider is allowed, as upstream allows it:
// the node is then always Ready. The listers' informers run until ctx ends.
func New(ctx context.Context, cfg Config, newProvider nodeutil.NewProviderFunc) (provider.PodLifecycleHandler, error) {
	if newProvider == nil {
		return nil, errors.New("upstream provider: no NewProviderFunc")
	}
	if cfg.Client == nil {
		return nil, errors.New("upstream provider: Config.Client is required: the provider's ProviderConfig listers read the API")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("upstream provider: Config.NodeName is required")
	}
	l := newListers(ctx, cfg.Client, cfg.NodeName)
	seed := seedNode(cfg.NodeName, cfg.InternalIP)
	p, np, err := newProvider(l.providerConfig(seed))
	if err != nil {
		return nil, fmt.Errorf("upstream provider: %w", err)
	}
	a, err := adapt(cfg, p, np)
	if err != nil {
		return nil, err
	}
	a.listers = l
	a.node = seed.DeepCopy()
	return a.withNotifier(), nil
}

// Wrap adapts an upstream provider already built: p, and np (nil: the node is
// always Ready). If p has upstream's command-line ConfigureNode method, it
// configures vkubelet's node. A provider built so reads no listers of the
// adapter's.
func Wrap(cfg Config, p nodeutil.Provider, np node.NodeProvider) (provider.PodLifecycleHandler, error) {
	a, err := adapt(cfg, p, np)
	if err != nil {
		return nil, err
	}
	if c, ok := p.(nodeConfigurer); ok {
		a.configurer = c
	}
	return a.withNotifier(), nil
}

func adapt(cfg Config, p nodeutil.Provider, np node.NodeProvider) (*Adapter, error) {
	if p == nil {
		return nil, errors.New("upstream provider: the NewProviderFunc returned no provider")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Adapter{p: p, np: np, log: log, now: time.Now}
	if cfg.Serialize {
		a.serial = &sync.Mutex{}
	}
	if cfg.StatusFromNotifications && notifies(p) {
		a.notified = newNotified(func() time.Time { return a.now() })
	}
	return a, nil
}

// Adapter is an upstream provider seen through vkubelet's contract. It
// implements every optional interface the upstream contract has a counterpart
// for; New and Wrap return it, or, for a provider that is a node.PodNotifier, a
// value that also implements provider.PodNotifier.
type Adapter struct {
	p   nodeutil.Provider
	np  node.NodeProvider // nil: always Ready
	log *slog.Logger
	now func() time.Time

	// serial, if not nil, is held around each serialized call (Config.Serialize).
	serial *sync.Mutex
	// listers serve the provider's ProviderConfig (New only).
	listers *listers
	// node is what a NewProviderFunc set on its Node (New only); configurer the
	// provider's own ConfigureNode (Wrap only).
	node       *corev1.Node
	configurer nodeConfigurer
	// notified answers for a notifying provider whose GetPod or GetPodStatus
	// fails (Config.StatusFromNotifications; nil for others).
	notified *notified
}

// notifyingAdapter is an Adapter of a provider that pushes pod statuses.
type notifyingAdapter struct{ *Adapter }

func (a *Adapter) withNotifier() provider.PodLifecycleHandler {
	if notifies(a.p) {
		return notifyingAdapter{a}
	}
	return a
}

var (
	_ provider.PodLifecycleHandler     = (*Adapter)(nil)
	_ provider.ResolvedPodHandler      = (*Adapter)(nil)
	_ provider.NodeProvider            = (*Adapter)(nil)
	_ provider.NodeConfigurer          = (*Adapter)(nil)
	_ provider.ContainerLogsProvider   = (*Adapter)(nil)
	_ provider.ContainerExecProvider   = (*Adapter)(nil)
	_ provider.ContainerAttachProvider = (*Adapter)(nil)
	_ provider.PortForwardProvider     = (*Adapter)(nil)
	_ provider.StatsProvider           = (*Adapter)(nil)
	_ provider.ResourceMetricsProvider = (*Adapter)(nil)
	_ provider.PodNotifier             = notifyingAdapter{}
)

// serialize holds the call lock, if there is one, until the returned func runs.
func (a *Adapter) serialize() func() {
	if a.serial == nil {
		return func() {}
	}
	a.serial.Lock()
	return a.serial.Unlock
}

// CreatePod hands pod to the provider as it is; vkubelet calls
// CreateResolvedPod instead, which resolves its environment first.
func (a *Adapter) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	if err := a.track(ctx, pod); err != nil {
		return err
	}
	if a.notified != nil {
		a.notified.created(pod)
	}
	defer a.serialize()()
	return podErr(pod, a.p.CreatePod(ctx, pod))
}

// UpdatePod hands pod to the provider; see CreatePod. Upstream's node always
// handed over the API's pod, status included, and some providers (upstream's
// mock) keep the pod they are given as their record of it: a pod that comes
// without a status gets the provider's own.
func (a *Adapter) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	if err := a.track(ctx, pod); err != nil {
		return err
	}
	defer a.serialize()()
	if pod.Status.Phase == "" {
		if st, err := a.p.GetPodStatus(ctx, pod.Namespace, pod.Name); err == nil && st != nil {
			pod.Status = *st.DeepCopy()
		}
	}
	return podErr(pod, a.p.UpdatePod(ctx, pod))
}

// CreateResolvedPod hands the provider the pod with each container's resolved
// environment in its env, as upstream's node did.
func (a *Adapter) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return a.CreatePod(ctx, withEnv(rp))
}

// UpdateResolvedPod is UpdatePod with the environment resolved.
func (a *Adapter) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return a.UpdatePod(ctx, withEnv(rp))
}

// withEnv puts rp's environment into its pod's containers, envFrom emptied, as
// upstream's node gave pods to its providers. The slices are copied: the
// resolution's are shared, the pod is the provider's to change.
func withEnv(rp *provider.ResolvedPod) *corev1.Pod {
	pod := rp.Pod
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		c.Env, c.EnvFrom = slices.Clone(rp.Env[c.Name]), nil
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Env, c.EnvFrom = slices.Clone(rp.Env[c.Name]), nil
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		c.Env, c.EnvFrom = slices.Clone(rp.Env[c.Name]), nil
	}
	return pod
}

// DeletePod asks the provider to stop the pod; the ConfigMaps and Secrets it
// referenced are let go of once the provider has it no more.
func (a *Adapter) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	unlock := a.serialize()
	err := podErr(pod, a.p.DeletePod(ctx, pod))
	unlock()
	if a.listers != nil && (err == nil || errdefs.IsNotFound(err)) {
		a.listers.forget(pod.Namespace, pod.Name)
	}
	if a.notified != nil && err == nil {
		a.notified.deleted(pod)
	}
	return err
}

// GetPod returns a copy of the provider's pod: upstream's providers may return
// the object they keep changing. A nil pod, which upstream's node took for
// absent, is NotFound.
func (a *Adapter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	unlock := a.serialize()
	pod, err := a.p.GetPod(ctx, namespace, name)
	if pod != nil {
		pod = pod.DeepCopy()
	}
	unlock()
	if err != nil {
		last, gone := a.lastNotified(namespace, name, err)
		switch {
		case gone:
			return nil, errGone(namespace, name)
		case last != nil:
			return last, nil
		}
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, fromUpstream(err))
	}
	if pod == nil {
		return nil, errdefs.NotFound("pod %s/%s: not known to the provider", namespace, name)
	}
	return pod, nil
}

// GetPodStatus is GetPod's status, copied and with nil as NotFound.
func (a *Adapter) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	unlock := a.serialize()
	st, err := a.p.GetPodStatus(ctx, namespace, name)
	if st != nil {
		st = st.DeepCopy()
	}
	unlock()
	if err != nil {
		last, gone := a.lastNotified(namespace, name, err)
		switch {
		case gone:
			return nil, errGone(namespace, name)
		case last != nil:
			return &last.Status, nil
		}
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, fromUpstream(err))
	}
	if st == nil {
		return nil, errdefs.NotFound("pod %s/%s: not known to the provider", namespace, name)
	}
	return st, nil
}

// lastNotified is the pod's last notification, for a notifying provider whose
// GetPod or GetPodStatus failed with err other than NotFound; else nil. gone
// reports a pod deleted in such a provider long enough ago (notified.get).
func (a *Adapter) lastNotified(namespace, name string, err error) (last *corev1.Pod, gone bool) {
	if a.notified == nil || errdefs.IsNotFound(fromUpstream(err)) {
		return nil, false
	}
	last, gone = a.notified.get(namespace, name)
	if last != nil {
		a.log.Debug("the provider cannot read the pod; its last notification answers", "pod", namespace+"/"+name, "error", err)
	}
	return last, gone
}

// errGone answers for a pod deleted in a notifying provider that cannot read
// its pods, once its grace period and a minute are over.
func errGone(namespace, name string) error {
	return errdefs.NotFound("pod %s/%s: deleted in the provider, which cannot read its pods, past its grace period and %s: taken as stopped", namespace, name, forgetAfter)
}

// GetPods returns copies of the provider's pods.
func (a *Adapter) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	unlock := a.serialize()
	pods, err := a.p.GetPods(ctx)
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p != nil {
			out = append(out, p.DeepCopy())
		}
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", fromUpstream(err))
	}
	return out, nil
}

// NotifyPods registers notify with the provider; each pod it reports is copied,
// as upstream's providers may go on changing it.
func (a notifyingAdapter) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	a.p.(node.PodNotifier).NotifyPods(ctx, func(p *corev1.Pod) {
		if p != nil {
			if a.notified != nil {
				a.notified.remember(p.DeepCopy())
			}
			notify(p.DeepCopy())
		}
	})
}

// Ping is the NodeProvider's; without one the node is always healthy.
func (a *Adapter) Ping(ctx context.Context) error {
	if a.np == nil {
		return nil
	}
	return fromUpstream(a.np.Ping(ctx))
}

// NotifyNodeStatus registers notify with the NodeProvider, if there is one.
func (a *Adapter) NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node)) {
	if a.np != nil {
		a.np.NotifyNodeStatus(ctx, notify)
	}
}

// ConfigureNode gives n what the provider set on its Node (New), or has the
// provider's own ConfigureNode configure it (Wrap).
func (a *Adapter) ConfigureNode(ctx context.Context, n *corev1.Node) {
	if a.node != nil {
		configureFrom(n, a.node)
		if set, own := a.node.Status.DaemonEndpoints.KubeletEndpoint.Port, n.Status.DaemonEndpoints.KubeletEndpoint.Port; set != 0 && set != own {
			a.log.Info("the upstream provider's kubelet port is not advertised: the node's own is", "provider", set, "node", own)
		}
	}
	if a.configurer != nil {
		a.configurer.ConfigureNode(ctx, n)
	}
}

// hasContainer answers NotFound for a pod or container the provider does not
// have, before a stream is asked of it: upstream's providers were never asked so
// by upstream's node, and some (upstream's mock) answer any name.
func (a *Adapter) hasContainer(ctx context.Context, namespace, pod, container string) error {
	p, err := a.GetPod(ctx, namespace, pod)
	if errdefs.IsNotFound(err) {
		return err
	}
	if err != nil {
		// The provider cannot tell: it is asked for the stream, as upstream's
		// node always asked it.
		return nil
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		if slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == container }) {
			return nil
		}
	}
	if slices.ContainsFunc(p.Spec.EphemeralContainers, func(c corev1.EphemeralContainer) bool { return c.Name == container }) {
		return nil
	}
	return errdefs.NotFound("pod %s/%s has no container %q", namespace, pod, container)
}

// GetContainerLogs maps the options to upstream's (see logOptions).
func (a *Adapter) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	if err := a.hasContainer(ctx, namespace, pod, container); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	rc, err := a.p.GetContainerLogs(ctx, namespace, pod, container, logOptions(opts, a.now()))
	if err != nil {
		return nil, fmt.Errorf("logs of %s/%s/%s: %w", namespace, pod, container, fromUpstream(err))
	}
	if rc == nil {
		return nil, errdefs.NotFound("logs of %s/%s/%s: the provider has none", namespace, pod, container)
	}
	return rc, nil
}

// RunInContainer runs cmd through the provider; an exit status it reports (as
// k8s.io/utils/exec's ExitError) comes back as an *provider.ExecError.
func (a *Adapter) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	if err := a.hasContainer(ctx, namespace, pod, container); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return fromUpstreamExec(a.p.RunInContainer(ctx, namespace, pod, container, cmd, upstreamAttachIO(ctx, attach)))
}

// AttachToContainer attaches through the provider, as RunInContainer runs.
func (a *Adapter) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	if err := a.hasContainer(ctx, namespace, pod, container); err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return fromUpstreamExec(a.p.AttachToContainer(ctx, namespace, pod, container, upstreamAttachIO(ctx, attach)))
}

// PortForward is the provider's, unchanged but for its errors.
func (a *Adapter) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	return fromUpstream(a.p.PortForward(ctx, namespace, pod, port, stream))
}

// GetStatsSummary is the provider's; the types are the same.
func (a *Adapter) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	defer a.serialize()()
	s, err := a.p.GetStatsSummary(ctx)
	return s, fromUpstream(err)
}

// GetMetricsResource is the provider's; the types are the same.
func (a *Adapter) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	defer a.serialize()()
	m, err := a.p.GetMetricsResource(ctx)
	return m, fromUpstream(err)
}

// track has the listers hold what pod references before the provider reads it.
func (a *Adapter) track(ctx context.Context, pod *corev1.Pod) error {
	if a.listers == nil {
		return nil
	}
	return a.listers.track(ctx, pod)
}

// podErr maps an upstream error of a call about pod, naming the pod.
func podErr(pod *corev1.Pod, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, fromUpstream(err))
}
