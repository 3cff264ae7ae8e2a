package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
	"github.com/vkubelet/vkubelet/internal/wire/podwire"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/resolve"
)

// Config configures a Controller. Client, NodeName and Provider are required.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Provider provider.PodLifecycleHandler

	// OperatingSystem is the node's operating system, as its kubernetes.io/os
	// label says; a pod for another is rejected as the kubelet rejects it.
	// Default "linux", the node's default.
	OperatingSystem string

	// Workers is the number of workers creating, updating and deleting pods in the
	// provider (--pod-sync-workers). Default 10.
	Workers int
	// StatusWorkers is the number of workers writing pod statuses to the API
	// (--pod-status-workers). Default 50. A status write is one API request and
	// nothing else, so these workers spend their time waiting for the API server:
	// they bound the rate of status writes to StatusWorkers divided by the
	// server's latency. With 20 of them a loaded server answering in 60 ms held
	// pods 5.5 s in the status queue and the node at 84% of the server's own
	// rate (vkubeletctl bench, 10,000 pods); see docs/PERFORMANCE.md.
	StatusWorkers int
	// StatusPollInterval is how often pod statuses are read from a provider that does
	// not implement provider.PodNotifier, and how often a deleting pod is checked.
	// Default 5s.
	StatusPollInterval time.Duration
	// RemoveUnconfirmedAfter, if positive, is how long after a deleted pod's
	// grace period ends the node removes it from the API although the provider
	// has not confirmed that it stopped (--remove-unconfirmed-after). Zero, the
	// default, never does: the pod stays Terminating until the provider says
	// it stopped or no longer has it, as a kubelet keeps a deleted pod until
	// its containers stopped, which is what lets a StatefulSet promise at most
	// one copy of each pod. A bound gives that promise up for the provider's
	// slow or failed stops: the replacement may start while the old pod runs.
	RemoveUnconfirmedAfter time.Duration
	// ResyncPeriod re-queues every pod this often (--full-resync-period); 0 disables.
	ResyncPeriod time.Duration
	// Recorder records Events; nil creates one that writes to Client as "vkubelet".
	Recorder record.EventRecorder
	// Caches, if set, are the caches of ConfigMaps, Secrets and Services the
	// node's pods reference, shared with the other nodes of the process; nil:
	// the node's own.
	Caches *resolve.Caches
	// OnReady, if set, is called once, when Ready is closed, on Run's
	// goroutine; it must not block. For a caller that would otherwise keep a
	// goroutine waiting on Ready.
	OnReady func()
	// Timer, if set, keeps the delayed adds of the node's queues (retries,
	// grace-period checks) with those of the other nodes of the process; nil:
	// each queue keeps its own. It must run (Timer.Run) with Clock.
	Timer *sharedtimer.Timer
	// Source, if set, is the pod watch this node shares with the other nodes of
	// the process; nil watches the node's own pods (ResyncPeriod is then the
	// Source's).
	Source *Source
	// PodWatch is what the node's own pod watch (without a Source) asks for:
	// WatchNodePods (the default), WatchBoundPods or WatchAuto.
	PodWatch WatchScope
	// Metrics receives the controller's own metrics; nil keeps them unregistered.
	Metrics *Metrics
	// TokenCheckInterval is how often projected service-account tokens are checked
	// for refresh (they are renewed at 80% of their lifetime). Default 30s.
	TokenCheckInterval time.Duration
	// Clock drives grace periods and polling; nil means the real clock.
	Clock  clock.WithTicker
	Logger *slog.Logger
	// Tracer traces pod syncs, provider calls and status writes; nil traces
	// nothing. The contexts handed to the provider carry the spans, so a
	// provider that propagates trace context continues them.
	Tracer trace.Tracer
	// APIFeatures are the API server's features (apifeatures.Detect): a
	// status field its release lacks is not written, as that release's
	// kubelet does not write it. nil: every feature, as the newest release.
	APIFeatures *apifeatures.Set
}

// Controller syncs the pods bound to one node with a provider.
type Controller struct {
	client kubernetes.Interface
	// rawPods writes pod statuses and reads the pod written back encoded; nil
	// for a clientset without a REST client (client-go's fakes).
	rawPods  *podwire.Client
	nodeName string
	// os is the node's operating system: pods for another are rejected.
	os       string
	provider provider.PodLifecycleHandler
	// notifier is the provider as a PodNotifier, nil if it must be polled.
	notifier provider.PodNotifier
	// resolvedHandler is the provider as a ResolvedPodHandler, nil if it takes plain pods.
	resolvedHandler provider.ResolvedPodHandler
	// volumeUpdater is the provider as a VolumeUpdater, nil if it keeps no volumes current.
	volumeUpdater provider.VolumeUpdater
	// resolver resolves pod specs (env, volumes, pull secrets) before they reach the
	// provider, and tells us when what a pod references changes.
	resolver *resolve.Resolver

	// informers runs the node's own pod informer; nil with a Source.
	informers *informerutil.Informers
	// source is the process's shared pod watch, nil without one.
	source *Source
	// timer keeps the queues' delayed adds: the process's, or the controller's
	// own (ownTimer), which Run runs.
	timer    *sharedtimer.Timer
	ownTimer bool
	// pods reads pods bound to our node from the informer's cache.
	pods podCache
	// podsSynced is closed once the pod informer has synced: waited on in
	// place, where cache.WaitForCacheSync polls from a goroutine of its own,
	// one more per node of a NodeSet starting.
	podsSynced <-chan struct{}
	// podEvents are the handlers of the node's pod events.
	podEvents cache.ResourceEventHandler

	// syncQueue: pods to create or update in the provider.
	syncQueue *nodeQueue
	// statusQueue: pods whose status in the API may lag the provider's.
	statusQueue *nodeQueue
	// deleteQueue: pods to stop in the provider and, once stopped, hand to
	// removeQueue.
	deleteQueue *nodeQueue
	// removeQueue: deleting pods the provider has stopped (or whose grace
	// period is over), to remove from the API. A stage of its own, with the
	// status workers' count: a worker that made the provider call and then
	// the API request in turn was held for both, and with the deletion
	// workers busy, a provider's round trip (over the protocol) slowed the
	// node's deletions by its whole length.
	removeQueue *nodeQueue

	state *stateStore
	// removed holds the UID of each pod this controller removed from the API
	// until the informer reports it gone: a late update of it (the deletion
	// itself, seen after the removal) must not remove it a second time.
	removed removedPods
	// removable holds the UID of each deleting pod that deleteHandler handed
	// to removeQueue, until it is removed or forgotten.
	removable removedPods
	recorder  record.EventRecorder
	metrics   *Metrics
	clock     clock.WithTicker
	log       *slog.Logger
	tracer    trace.Tracer
	// features are the API server's (Config.APIFeatures).
	features *apifeatures.Set

	workers       int
	statusWorkers int
	pollInterval  time.Duration
	// removeUnconfirmedAfter is Config.RemoveUnconfirmedAfter.
	removeUnconfirmedAfter time.Duration
	ready                  chan struct{}
	onReady                func() // Config.OnReady
}

// NewController builds a pod controller. Nothing runs until Run.
func NewController(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Provider == nil {
		return nil, errors.New("pod controller: Client, NodeName and Provider are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 10
	}
	if cfg.StatusWorkers <= 0 {
		cfg.StatusWorkers = 50
	}
	if cfg.StatusPollInterval <= 0 {
		cfg.StatusPollInterval = 5 * time.Second
	}
	if cfg.OperatingSystem == "" {
		cfg.OperatingSystem = "linux"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Tracer == nil {
		cfg.Tracer = tracenoop.NewTracerProvider().Tracer("")
	}
	if cfg.Recorder == nil {
		b := record.NewBroadcaster()
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
		cfg.Recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vkubelet", Host: cfg.NodeName})
	}
	c := &Controller{
		client:                 cfg.Client,
		nodeName:               cfg.NodeName,
		os:                     cfg.OperatingSystem,
		provider:               cfg.Provider,
		source:                 cfg.Source,
		timer:                  cfg.Timer,
		state:                  newStateStore(),
		recorder:               cfg.Recorder,
		metrics:                cfg.Metrics,
		clock:                  cfg.Clock,
		log:                    cfg.Logger.With("component", "pod-controller", "node", cfg.NodeName),
		tracer:                 cfg.Tracer,
		features:               cfg.APIFeatures,
		workers:                cfg.Workers,
		statusWorkers:          cfg.StatusWorkers,
		pollInterval:           cfg.StatusPollInterval,
		removeUnconfirmedAfter: cfg.RemoveUnconfirmedAfter,
		ready:                  make(chan struct{}),
		onReady:                cfg.OnReady,
	}
	if n, ok := cfg.Provider.(provider.PodNotifier); ok {
		c.notifier = n
	}
	c.resolvedHandler, _ = cfg.Provider.(provider.ResolvedPodHandler)
	c.volumeUpdater, _ = cfg.Provider.(provider.VolumeUpdater)
	var err error
	c.resolver, err = resolve.New(resolve.Config{
		Client: cfg.Client, NodeName: cfg.NodeName, Recorder: cfg.Recorder, OnChange: c.handleReferenceChange,
		TokenCheckInterval: cfg.TokenCheckInterval, Clock: cfg.Clock, Logger: cfg.Logger, Caches: cfg.Caches,
	})
	if err != nil {
		return nil, fmt.Errorf("pod controller: %w", err)
	}
	c.ownTimer = ownTimer(c)
	c.syncQueue = c.newNodeQueue("pod_sync", c.syncHandler, c.workers)
	c.statusQueue = c.newNodeQueue("pod_status", c.statusHandler, c.statusWorkers)
	c.deleteQueue = c.newNodeQueue("pod_delete", c.deleteHandler, c.workers)
	c.removeQueue = c.newNodeQueue("pod_remove", c.removeHandler, c.statusWorkers)

	c.podEvents = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.handlePod(obj) },
		UpdateFunc: c.handleUpdatedPod,
		DeleteFunc: c.handleDeletedPod,
	}
	if cfg.Source != nil && cfg.Source.rawPods.SharedBy(cfg.Client) {
		c.rawPods = cfg.Source.rawPods
	} else {
		c.rawPods, _ = podwire.NewClient(cfg.Client)
	}
	if cfg.Source != nil {
		c.pods = podCache{indexer: cfg.Source.informer.GetIndexer(), node: cfg.NodeName}
		c.podsSynced = cfg.Source.informer.HasSyncedChecker().Done()
		return c, nil
	}
	// Without the namespace index client-go's factories give a pod informer,
	// which nothing here reads and which costs a set entry per pod; the cache
	// keeps pods encoded (compactTransform).
	// Its list and watch retry promptly while the API server is away, so pods bound
	// after an outage are seen within a second of its return (internal/informerutil).
	lw, err := nodePodsListWatch(cfg.Client, c.rawPods, cfg.NodeName, cfg.PodWatch, c.log)
	if err != nil {
		return nil, fmt.Errorf("pod controller: %w", err)
	}
	podInformer := podwire.NewInformer(lw, c.rawPods, cfg.ResyncPeriod, cache.Indexers{})
	if err := podInformer.SetTransform(podwire.TransformOf(podInformer.GetIndexer())); err != nil {
		return nil, fmt.Errorf("pod controller: %w", err)
	}
	c.informers = &informerutil.Informers{}
	c.informers.Add(podInformer)
	c.pods = podCache{indexer: podInformer.GetIndexer()}
	c.podsSynced = podInformer.HasSyncedChecker().Done()
	if _, err := podInformer.AddEventHandler(c.podEvents); err != nil {
		return nil, fmt.Errorf("pod controller: adding event handler: %w", err)
	}

	return c, nil
}

// Ready is closed once the informer has synced and the start-up reconcile with the
// provider is done.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Run starts the informer, reconciles with the provider and runs the workers until
// ctx ends. It returns an error only if it cannot start.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.syncQueue.ShutDown()
	defer c.statusQueue.ShutDown()
	defer c.deleteQueue.ShutDown()
	defer c.removeQueue.ShutDown()

	if c.ownTimer {
		go c.timer.Run(ctx)
	}
	if r, ok := c.provider.(provider.PodEventRecorder); ok {
		r.RecordPodEvents(c.recordProviderEvent)
	}
	if c.notifier != nil {
		c.notifier.NotifyPods(ctx, c.handleProviderPod)
	}
	c.resolver.Start()
	defer c.resolver.Stop()
	if c.source != nil {
		unregister, err := c.source.register(c.nodeName, c.podEvents)
		if err != nil {
			return err
		}
		defer unregister()
	} else {
		c.informers.Start(ctx.Done())
		defer c.informers.Shutdown()
	}
	c.log.Info("waiting for the pod informer to sync")
	select {
	case <-c.podsSynced:
	case <-ctx.Done():
		return fmt.Errorf("pod controller: informer did not sync: %w", ctx.Err())
	}
	if err := c.reconcileProvider(ctx); err != nil {
		return err
	}
	for _, q := range []*nodeQueue{c.syncQueue, c.deleteQueue, c.removeQueue, c.statusQueue} {
		q.start(ctx)
	}
	if c.notifier == nil {
		go c.pollStatuses(ctx)
	}
	close(c.ready)
	if c.onReady != nil {
		c.onReady()
	}
	c.log.Info("pod controller started", "workers", c.workers, "statusWorkers", c.statusWorkers, "notifier", c.notifier != nil)
	<-ctx.Done()
	return nil
}
