package node

import (
	"context"
	"errors"
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
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
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

	// timer ticks the lease renewals and status refreshes: the process's, shared
	// by its nodes, or one Run runs for this node alone.
	timer *sharedtimer.Timer
	// due holds what Run has to do (the due* bits), set by the timer's ticks, the
	// informer and the provider's callback, each of which then signals wake (1
	// slot, never blocks): one channel in place of one per cause and a ticker
	// each, for each of a NodeSet's thousand nodes.
	due  atomic.Uint32
	wake chan struct{}
	// latest is the newest node the provider reported (dueReported), guarded by
	// latestMu.
	latestMu sync.Mutex
	latest   *corev1.Node

	ready     chan struct{} // closed after registration and the first lease write
	readyOnce sync.Once
	// renewedAt is when the lease was last written (Unix nanoseconds; 0: never),
	// for LeaseCurrent.
	renewedAt atomic.Int64
	running   atomic.Bool // Run may be called once
	// removing: the Node, as last seen (by the informer or a read before a
	// write), is marked for removal (removal.go), so it is not created again.
	removing atomic.Bool

	// --- owned by Run ---

	// desired is the node we register: the config's defaults, the provider's
	// ConfigureNode, and the status it reported since. It is kept protobuf-
	// encoded (desiredCopy, setDesired), and packed for a node that shares a
	// Watch (desiredpack.go): it is read only when the Node is written, and a
	// decoded Node is some 3 KiB of maps and structs that each of a NodeSet's
	// thousand nodes would hold for good.
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
	// removed: the Node was deleted while marked for removal; nothing is
	// written any more (removal.go).
	removed bool
}

// NewController checks cfg and returns a controller for its node. Nothing is
// written before Run.
func NewController(cfg Config) (*Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:     cfg,
		client:  cfg.Client,
		clock:   cfg.Clock,
		log:     cfg.Logger.With("node", cfg.NodeName),
		timer:   cfg.Timer,
		wake:    make(chan struct{}, 1),
		ready:   make(chan struct{}),
		healthy: true,
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
// registers it again when it is deleted, unless it was marked for removal
// (RemovalAnnotation): then it stops writing. It blocks until ctx is done and then
// returns nil; failed writes are logged and retried, never fatal.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("node %s: controller is already running", c.cfg.NodeName)
	}
	// The informer on our Node tells us when it is deleted, replaced or marked
	// not Ready by someone else; everything else we read with a Get right before
	// writing.
	events := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*nodeSummary); ok {
				c.noteRemoval(n.Removing)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			oldNode, ok1 := oldObj.(*nodeSummary)
			newNode, ok2 := newObj.(*nodeSummary)
			if ok2 {
				c.noteRemoval(newNode.Removing)
			}
			if ok1 && ok2 && oldNode.UID != newNode.UID {
				c.poke(dueNodeGone)
			} else if ok1 && ok2 && newNode.Ready != corev1.ConditionTrue && oldNode.Ready != newNode.Ready {
				c.poke(dueMarkedNotReady)
			}
		},
		DeleteFunc: func(any) { c.poke(dueNodeGone) },
	}
	// synced is closed once the informer has synced: waited on in place, where
	// cache.WaitForCacheSync polls from a goroutine of its own, one more per
	// node of a NodeSet starting.
	var synced <-chan struct{}
	if w := c.cfg.Watch; w != nil {
		unregister, err := w.register(c.cfg.NodeName, events)
		if err != nil {
			return err
		}
		defer unregister()
		synced = w.informer.HasSyncedChecker().Done()
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
		synced = informer.HasSyncedChecker().Done()
	}

	if c.timer == nil {
		c.timer = sharedtimer.New(c.clock)
		timerCtx, stopTimer := context.WithCancel(ctx)
		timerDone := make(chan struct{})
		go func() {
			defer close(timerDone)
			c.timer.Run(timerCtx)
		}()
		defer func() {
			stopTimer()
			<-timerDone
		}()
	}
	renew := c.timer.Every(c.cfg.RenewInterval, func() { c.poke(dueRenew) })
	defer renew.Stop()
	refresh := c.timer.Every(c.cfg.StatusUpdateInterval, func() { c.poke(dueRefresh) })
	defer refresh.Stop()

	c.configure(ctx)
	select {
	case <-synced:
	case <-ctx.Done():
		return nil
	}
	for {
		err := c.writeNode(ctx)
		if errors.Is(err, errRemoved) {
			// Marked and deleted before this process registered it.
			c.markRemoved()
			break
		}
		if err == nil {
			break
		}
		c.log.Error("registering node failed; retrying", "err", err, "retryIn", c.cfg.RenewInterval)
		if !c.waitFor(ctx, dueRenew) {
			return nil
		}
	}
	if c.nodeProvider != nil {
		c.nodeProvider.NotifyNodeStatus(ctx, c.notifyNodeStatus)
	}
	c.heartbeat(ctx)

	for {
		due := c.due.Swap(0)
		if due == 0 {
			select {
			case <-ctx.Done():
				c.log.Info("node controller stopped")
				return nil
			case <-c.wake:
			}
			continue
		}
		c.handle(ctx, due)
	}
}

// What Run has to do, as bits of Controller.due.
const (
	// dueRenew: a RenewInterval passed; ping the provider and renew the lease.
	dueRenew uint32 = 1 << iota
	// dueRefresh: a StatusUpdateInterval passed; write the status.
	dueRefresh
	// dueReported: the provider reported a node status (NotifyNodeStatus).
	dueReported
	// dueMarkedNotReady: someone else set the node's Ready condition to other
	// than True (the node-lifecycle controller does, when it misses leases
	// during an outage), so a healthy node puts its status right at once
	// instead of at the next StatusUpdateInterval.
	dueMarkedNotReady
	// dueNodeGone: the node was deleted or replaced; register it again at once
	// (unless it was marked for removal).
	dueNodeGone
)

// poke records what is due and wakes Run; it never blocks.
func (c *Controller) poke(what uint32) {
	c.due.Or(what)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// waitFor waits until what is due and takes it, leaving anything else due for
// later; false if ctx ended first.
func (c *Controller) waitFor(ctx context.Context, what uint32) bool {
	for c.due.And(^what)&what == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-c.wake:
		}
	}
	if c.due.Load() != 0 {
		c.poke(0) // what else is due is seen by the next wait
	}
	return true
}

// handle does what is due: a deleted node first (registered again, with its
// lease pointed at it), then one status write for however many causes, then
// the heartbeat.
func (c *Controller) handle(ctx context.Context, due uint32) {
	if c.removed {
		return
	}
	if due&dueNodeGone != 0 {
		if !c.removing.Load() {
			c.log.Info("node was deleted or replaced; registering it again")
		}
		c.syncNode(ctx)
		if c.removed {
			return
		}
		if c.healthy && !c.statusDirty {
			c.renewLease(ctx) // point the lease at the new Node at once
		}
	}
	write := due&(dueRefresh|dueReported) != 0
	if due&dueReported != 0 {
		c.takeReportedStatus()
	}
	if due&dueMarkedNotReady != 0 && c.healthy {
		c.log.Info("node was marked not Ready by someone else while healthy; writing its status")
		write = true
	}
	if write {
		c.syncNode(ctx)
	}
	if due&dueRenew != 0 {
		c.heartbeat(ctx)
	}
}
