package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/provider"
)

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
	// declaresFeatures: Config.Provider is a provider.FeatureDeclarer, so the
	// node's status.declaredFeatures is the provider's (set by configure);
	// otherwise the controller never writes that field.
	declaresFeatures bool

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
	// lease is the lease as we last wrote it, protobuf-encoded (keepLease,
	// leaseCopy); nil means "read it first".
	lease []byte
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
		// Its own context (a shared Watch needs none: a NodeSet's nodes do
		// without one each), ended before Shutdown waits for the informer.
		informerCtx, stopInformer := context.WithCancel(ctx)
		byName := fields.OneTermEqualSelector("metadata.name", c.cfg.NodeName).String()
		lw := informerutil.ListWatchOf(c.client, c.client.CoreV1().Nodes(), func(o *metav1.ListOptions) { o.FieldSelector = byName })
		informer := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
		var run informerutil.Informers
		run.Add(informer)
		defer func() {
			stopInformer()
			run.Shutdown() // waits for the informer to stop
		}()
		if err := informer.SetTransform(slimNode); err != nil {
			return fmt.Errorf("node %s: watching the node: %w", c.cfg.NodeName, err)
		}
		if _, err := informer.AddEventHandler(events); err != nil {
			return fmt.Errorf("node %s: watching the node: %w", c.cfg.NodeName, err)
		}
		run.Start(informerCtx.Done())
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

// signal wakes the receiver of a 1-slot channel without ever blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
