package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/provider"
)

// Config says which node to register and how to keep it alive. Zero durations,
// OperatingSystem, Architecture, Clock and Logger take the defaults documented on
// each field.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// ProviderName is the value of the virtual-kubelet.io/provider=<name>:NoSchedule
	// taint, which is put on the node unless DisableTaint. With DisableTaint, a taint
	// of that key left by an earlier run is removed.
	ProviderName string
	DisableTaint bool
	// AsNode says the client authenticates as the node itself
	// (system:node:<name>): the NodeRestriction admission plugin then refuses
	// labels in the kubernetes.io and k8s.io namespaces that a kubelet may not
	// set, so kubernetes.io/role is left out.
	AsNode bool
	// OperatingSystem and Architecture go to the kubernetes.io/os and
	// kubernetes.io/arch labels and to nodeInfo. Defaults: "linux", runtime.GOARCH.
	OperatingSystem string
	Architecture    string
	// InternalIP is the node's InternalIP address; NodeName is always its Hostname.
	InternalIP string
	// KubeletPort is where the kubelet API listens (status.daemonEndpoints).
	KubeletPort    int32
	KubeletVersion string
	// Provider may implement provider.NodeProvider (health and status updates) and
	// provider.NodeConfigurer (capacity, providerID, topology); it may be nil.
	Provider any
	// LeaseDuration is the lease's leaseDurationSeconds (default 40s); RenewInterval
	// how often it is renewed (default 10s) and must be shorter.
	LeaseDuration time.Duration
	RenewInterval time.Duration
	// StatusUpdateInterval is how often the whole status is written even when nothing
	// changed, refreshing the heartbeat times of the conditions (default 5m, the
	// kubelet's nodeStatusReportFrequency: the Lease, not the status, says the node
	// is alive, and a thousand idle nodes writing their status every minute would
	// cost the API server 17 writes a second for nothing).
	StatusUpdateInterval time.Duration
	// PingTimeout bounds each provider Ping (default 5s).
	PingTimeout time.Duration
	// Clock drives renewals and status refreshes and stamps the times written
	// (default: the real clock). Tests pass a fake one.
	Clock  clock.WithTicker
	Logger *slog.Logger

	// Labels and Taints are the operator's, added to the node's own (a label
	// given here wins over the provider's; the hostname label stays the node's
	// name). Capacity, if set, overrides the provider's capacity and allocatable
	// resource by resource.
	Labels   map[string]string
	Taints   []corev1.Taint
	Capacity corev1.ResourceList

	// Watch, if set, is the Node watch the controller shares with the other
	// nodes of the process; nil watches its own Node.
	Watch *Watch
}

// withDefaults returns cfg with the zero fields filled in, or an error naming the
// first invalid one.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Client == nil {
		return cfg, errors.New("node: Config.Client is required")
	}
	if cfg.NodeName == "" {
		return cfg, errors.New("node: Config.NodeName is required")
	}
	if cfg.OperatingSystem == "" {
		cfg.OperatingSystem = "linux"
	}
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 10 * time.Second
	}
	if cfg.StatusUpdateInterval == 0 {
		cfg.StatusUpdateInterval = 5 * time.Minute
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.LeaseDuration < time.Second:
		return cfg, fmt.Errorf("node %s: LeaseDuration %s is under the 1s resolution of a lease", cfg.NodeName, cfg.LeaseDuration)
	case cfg.RenewInterval < 0 || cfg.RenewInterval >= cfg.LeaseDuration:
		return cfg, fmt.Errorf("node %s: RenewInterval %s must be positive and shorter than LeaseDuration %s", cfg.NodeName, cfg.RenewInterval, cfg.LeaseDuration)
	case cfg.StatusUpdateInterval < 0 || cfg.PingTimeout < 0:
		return cfg, fmt.Errorf("node %s: StatusUpdateInterval and PingTimeout must be positive", cfg.NodeName)
	}
	return cfg, nil
}

// Controller registers the virtual node and keeps it, its status and its lease up
// to date. All of its state below the "owned by Run" line is touched only by the
// goroutine running Run (or by a test calling the sync methods directly), so it
// needs no lock.
type Controller struct {
	cfg    Config
	client kubernetes.Interface // writes the Node and its Lease
	clock  clock.WithTicker     // drives renewals and stamps every time written
	log    *slog.Logger

	// nodeProvider is Config.Provider as a NodeProvider, nil if it is not one: then
	// the node is always healthy and its status changes only with the config.
	nodeProvider provider.NodeProvider
	// configurer is Config.Provider as a NodeConfigurer, nil if it is not one.
	configurer provider.NodeConfigurer

	// nodeGone is signalled (1 slot, never blocks) by the informer on our node when
	// it is deleted or replaced, so that Run registers it again at once.
	nodeGone chan struct{}
	// markedNotReady is signalled (1 slot) by the informer when someone else set
	// the node's Ready condition to other than True (the node-lifecycle controller
	// does, when it misses leases during an outage), so that a healthy node puts
	// its status right at once instead of at the next StatusUpdateInterval.
	markedNotReady chan struct{}
	// reported is signalled (1 slot) by the NotifyNodeStatus callback; the newest
	// reported node waits in latest, guarded by latestMu.
	reported chan struct{}
	latestMu sync.Mutex
	latest   *corev1.Node

	ready     chan struct{} // closed after registration and the first lease write
	readyOnce sync.Once
	// renewedAt is when the lease was last written (Unix nanoseconds; 0: never),
	// for LeaseCurrent.
	renewedAt atomic.Int64
	running   atomic.Bool // Run may be called once

	// --- owned by Run ---

	// desired is the node we register: the config's defaults, the provider's
	// ConfigureNode, and the status it reported since. It is kept protobuf-
	// encoded (desiredCopy, setDesired): it is read only when the Node is
	// written, and a decoded Node is some 3 KiB of maps and structs that each of
	// a NodeSet's thousand nodes would hold for good.
	desired []byte
	// written is the status we last wrote, to remove resources no longer reported.
	written writtenResources
	// nodeUID is the UID of the Node as we last saw it: the lease's owner.
	nodeUID types.UID
	// lease is the lease as we last wrote it; nil means "read it first".
	lease *coordinationv1.Lease
	// healthy is whether the last provider Ping succeeded. While it is false, the
	// controller writes nothing, so the node-lifecycle controller marks the node
	// Unknown; writes owed meanwhile are recorded in statusDirty.
	healthy bool
	// statusDirty says a write of the node failed or was held back and is owed.
	statusDirty bool
}

// NewController checks cfg and returns a controller for its node. Nothing is
// written before Run.
func NewController(cfg Config) (*Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:            cfg,
		client:         cfg.Client,
		clock:          cfg.Clock,
		log:            cfg.Logger.With("node", cfg.NodeName),
		nodeGone:       make(chan struct{}, 1),
		markedNotReady: make(chan struct{}, 1),
		reported:       make(chan struct{}, 1),
		ready:          make(chan struct{}),
		healthy:        true,
	}
	c.nodeProvider, _ = cfg.Provider.(provider.NodeProvider)
	c.configurer, _ = cfg.Provider.(provider.NodeConfigurer)
	return c, nil
}

// Ready is closed once the node is registered and its first lease written (which
// takes a successful provider Ping).
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Run registers the node, then renews its lease every RenewInterval, writes its
// status every StatusUpdateInterval and whenever the provider reports a change, and
// registers it again when it is deleted. It blocks until ctx is done and then
// returns nil; failed writes are logged and retried, never fatal.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("node %s: controller is already running", c.cfg.NodeName)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The informer on our Node tells us when it is deleted, replaced or marked
	// not Ready by someone else; everything else we read with a Get right before
	// writing.
	events := cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			oldNode, ok1 := oldObj.(*nodeSummary)
			newNode, ok2 := newObj.(*nodeSummary)
			if ok1 && ok2 && oldNode.UID != newNode.UID {
				signal(c.nodeGone)
			} else if ok1 && ok2 && newNode.Ready != corev1.ConditionTrue && oldNode.Ready != newNode.Ready {
				signal(c.markedNotReady)
			}
		},
		DeleteFunc: func(any) { signal(c.nodeGone) },
	}
	var synced cache.InformerSynced
	if w := c.cfg.Watch; w != nil {
		unregister, err := w.register(c.cfg.NodeName, events)
		if err != nil {
			return err
		}
		defer unregister()
		synced = w.informer.HasSynced
	} else {
		// It retries promptly while the API server is away (internal/informerutil).
		factory := informers.NewSharedInformerFactory(c.client, 0)
		defer func() {
			cancel()
			factory.Shutdown() // waits for the informer to stop
		}()
		informer := factory.InformerFor(&corev1.Node{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			byName := fields.OneTermEqualSelector("metadata.name", c.cfg.NodeName).String()
			lw := informerutil.ListWatchOf(client, client.CoreV1().Nodes(), func(o *metav1.ListOptions) { o.FieldSelector = byName })
			return cache.NewSharedIndexInformer(lw, &corev1.Node{}, resync, cache.Indexers{})
		})
		if err := informer.SetTransform(slimNode); err != nil {
			return fmt.Errorf("node %s: watching the node: %w", c.cfg.NodeName, err)
		}
		if _, err := informer.AddEventHandler(events); err != nil {
			return fmt.Errorf("node %s: watching the node: %w", c.cfg.NodeName, err)
		}
		factory.Start(ctx.Done())
		synced = informer.HasSynced
	}

	renew := c.clock.NewTicker(c.cfg.RenewInterval)
	defer renew.Stop()
	refresh := c.clock.NewTicker(c.cfg.StatusUpdateInterval)
	defer refresh.Stop()

	c.configure(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return nil
	}
	for {
		err := c.writeNode(ctx)
		if err == nil {
			break
		}
		c.log.Error("registering node failed; retrying", "err", err, "retryIn", c.cfg.RenewInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-renew.C():
		}
	}
	if c.nodeProvider != nil {
		c.nodeProvider.NotifyNodeStatus(ctx, c.notifyNodeStatus)
	}
	c.heartbeat(ctx)

	for {
		select {
		case <-ctx.Done():
			c.log.Info("node controller stopped")
			return nil
		case <-renew.C():
			c.heartbeat(ctx)
		case <-refresh.C():
			c.syncNode(ctx)
		case <-c.reported:
			c.takeReportedStatus()
			c.syncNode(ctx)
		case <-c.markedNotReady:
			if c.healthy {
				c.log.Info("node was marked not Ready by someone else while healthy; writing its status")
				c.syncNode(ctx)
			}
		case <-c.nodeGone:
			c.log.Info("node was deleted or replaced; registering it again")
			c.syncNode(ctx)
			if c.healthy && !c.statusDirty {
				c.renewLease(ctx) // point the lease at the new Node at once
			}
		}
	}
}

// configure builds the desired node from the config and the provider's ConfigureNode.
func (c *Controller) configure(ctx context.Context) {
	n := desiredNode(c.cfg)
	if c.configurer != nil {
		c.configurer.ConfigureNode(ctx, n)
	}
	n.Status.Conditions = withDefaultConditions(n.Status.Conditions)
	withOperatorSettings(n, c.cfg)
	c.setDesired(n)
}

// desiredCopy decodes the desired node; the result is the caller's.
func (c *Controller) desiredCopy() *corev1.Node {
	n := &corev1.Node{}
	if err := n.Unmarshal(c.desired); err != nil {
		// setDesired encoded these bytes: failing to read them back is a bug.
		panic(fmt.Sprintf("node %s: decoding the desired node: %v", c.cfg.NodeName, err))
	}
	return n
}

// setDesired keeps n, encoded, as the desired node.
func (c *Controller) setDesired(n *corev1.Node) {
	raw, err := n.Marshal()
	if err != nil {
		// A Node built from the config and the provider's reports always encodes.
		panic(fmt.Sprintf("node %s: encoding the desired node: %v", c.cfg.NodeName, err))
	}
	c.desired = raw
}

// notifyNodeStatus is the callback given to the provider's NotifyNodeStatus. It
// keeps only the newest node and wakes Run; it never blocks.
func (c *Controller) notifyNodeStatus(n *corev1.Node) {
	if n == nil {
		return
	}
	n = n.DeepCopy() // the provider may go on mutating its copy
	c.latestMu.Lock()
	c.latest = n
	c.latestMu.Unlock()
	signal(c.reported)
}

// takeReportedStatus folds the newest reported node, if any, into the desired status.
func (c *Controller) takeReportedStatus() {
	c.latestMu.Lock()
	n := c.latest
	c.latest = nil
	c.latestMu.Unlock()
	if n != nil {
		d := c.desiredCopy()
		d.Status = withReportedStatus(d.Status, n.Status)
		overrideCapacity(&d.Status, c.cfg.Capacity)
		c.setDesired(d)
	}
}

// heartbeat pings the provider and, if it answers, writes any owed node status and
// renews the lease. While Ping fails, nothing is written: the lease expires and the
// node-lifecycle controller marks the node Unknown. On recovery the node is written
// at once with Ready=True and fresh times, then the lease is renewed.
func (c *Controller) heartbeat(ctx context.Context) {
	if err := c.ping(ctx); err != nil {
		if c.healthy {
			c.log.Warn("provider ping failed; not renewing the node lease until it recovers", "err", err)
		} else {
			c.log.Debug("provider ping still failing", "err", err)
		}
		c.healthy = false
		return
	}
	if !c.healthy {
		c.log.Info("provider ping recovered; renewing the node lease")
		c.healthy = true
		c.statusDirty = true
	}
	if c.statusDirty {
		c.syncNode(ctx)
	}
	if c.renewLease(ctx) {
		c.readyOnce.Do(func() { close(c.ready) })
	}
}

func (c *Controller) ping(ctx context.Context) error {
	if c.nodeProvider == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PingTimeout)
	defer cancel()
	return c.nodeProvider.Ping(ctx)
}

// syncNode writes the node, recording a failed or held-back write as owed so that
// the next heartbeat retries it.
func (c *Controller) syncNode(ctx context.Context) {
	if !c.healthy {
		c.statusDirty = true
		return
	}
	if err := c.writeNode(ctx); err != nil {
		c.log.Error("writing node failed; retrying at the next renewal", "err", err)
		c.statusDirty = true
		return
	}
	c.statusDirty = false
}

// writeNode makes the Node in the API server match c.desired: it creates the node
// if there is none, and otherwise patches in our labels, taints and providerID
// (when they differ) and our status, leaving every other field alone.
func (c *Controller) writeNode(ctx context.Context) error {
	name := c.cfg.NodeName
	nodes := c.client.CoreV1().Nodes()
	now := c.clock.Now()
	desired := c.desiredCopy()
	cur, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created, err := nodes.Create(ctx, nodeForCreate(desired, now), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %s: registering: %w", name, err)
		}
		c.nodeUID = created.UID
		c.written = writtenOf(&desired.Status)
		c.log.Info("registered node", "uid", created.UID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s: reading: %w", name, err)
	}
	if cur.UID != c.nodeUID {
		c.log.Info("found existing node; merging our labels, taints and status into it", "uid", cur.UID)
		c.nodeUID = cur.UID
	}
	if err := c.patchMetadata(ctx, cur, desired); err != nil {
		return err
	}
	patch, err := statusPatch(cur, c.written, &desired.Status, now)
	if err != nil {
		return err
	}
	if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("node %s: patching status: %w", name, err)
	}
	c.written = writtenOf(&desired.Status)
	return nil
}

// patchMetadata applies metadataPatch of desired to cur, reading the node again
// after a conflict (a taint changed by someone else between our read and our
// write).
func (c *Controller) patchMetadata(ctx context.Context, cur, desired *corev1.Node) error {
	nodes := c.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			var err error
			if cur, err = nodes.Get(ctx, c.cfg.NodeName, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		patch, err := metadataPatch(cur, desired, c.cfg.DisableTaint)
		if err != nil || patch == nil {
			return err
		}
		cur = nil
		_, err = nodes.Patch(ctx, c.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s: patching labels and taints: %w", c.cfg.NodeName, err)
	}
	return nil
}

// renewLease writes the lease, renewed now and owned by the current Node. A write
// from a stale copy (conflict, or the lease was garbage-collected with an earlier
// Node) is retried once from a fresh read. It reports success; failures are logged.
func (c *Controller) renewLease(ctx context.Context) bool {
	err := c.tryRenewLease(ctx)
	if err != nil && c.lease != nil {
		c.lease = nil
		err = c.tryRenewLease(ctx)
	}
	if err != nil {
		c.log.Error("renewing node lease failed", "err", err)
		return false
	}
	c.renewedAt.Store(c.clock.Now().UnixNano())
	return true
}

// LeaseCurrent returns nil while the node's lease was renewed within its duration,
// that is while the cluster sees the node alive; else why not. It serves the
// agent's /readyz.
func (c *Controller) LeaseCurrent() error {
	at := c.renewedAt.Load()
	if at == 0 {
		return fmt.Errorf("node %s: lease not written yet", c.cfg.NodeName)
	}
	if age := c.clock.Since(time.Unix(0, at)); age > c.cfg.LeaseDuration {
		return fmt.Errorf("node %s: lease last renewed %s ago, longer than its duration %s", c.cfg.NodeName, age.Round(time.Second), c.cfg.LeaseDuration)
	}
	return nil
}

func (c *Controller) tryRenewLease(ctx context.Context) error {
	name := c.cfg.NodeName
	leases := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	base := c.lease
	if base == nil {
		got, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			created, err := leases.Create(ctx, renewedLease(nil, name, c.nodeUID, c.cfg.LeaseDuration, c.clock.Now()), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("node %s: creating lease: %w", name, err)
			}
			c.lease = withoutManagedFields(created)
			return nil
		}
		if err != nil {
			return fmt.Errorf("node %s: reading lease: %w", name, err)
		}
		base = got
	}
	updated, err := leases.Update(ctx, renewedLease(base, name, c.nodeUID, c.cfg.LeaseDuration, c.clock.Now()), metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: renewing lease: %w", name, err)
	}
	c.lease = withoutManagedFields(updated)
	return nil
}

// withoutManagedFields drops l's managed fields before it is kept until the
// next renewal: an update that carries none leaves the server's as they are.
func withoutManagedFields(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.ManagedFields = nil
	return l
}

// signal wakes the receiver of a 1-slot channel without ever blocking.
// readyStatus is the status of n's Ready condition, "" without one.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
