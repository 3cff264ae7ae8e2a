// Package agent wires a virtual node together: API client, provider, node
// controller, pod controller and the agent's own metrics endpoint. It is the only
// package besides the commands that knows every other one; `vkubelet` and `vkubeletctl up`
// call Run.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/process/tracing"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
	"github.com/vkubelet/vkubelet/internal/version"
	"github.com/vkubelet/vkubelet/kubeletapi"
	"github.com/vkubelet/vkubelet/node"
	"github.com/vkubelet/vkubelet/pod"
)

// Node is a running virtual node.
type Node struct {
	cfg      Config
	client   kubernetes.Interface
	provider any
	nodes    *node.Controller
	pods     *pod.Controller
	// gatherer gathers the metrics the node serves: its own registry's, or
	// those of the process it shares (Shared).
	gatherer prometheus.Gatherer
	log      *slog.Logger
	// kubeletListener is bound in New so the node can advertise the real port.
	kubeletListener net.Listener
	// unready counts the parts not ready yet (node controller, pod
	// controller, kubelet API, which may wait for its certificate); the last
	// to be calls onReady, Run's ready (partReady). A startup timeout sets it
	// below zero for good.
	unready atomic.Int32
	onReady func()
	// stopTracing sends the spans still buffered; Run calls it on the way out.
	stopTracing func(context.Context) error
	// apiMetrics count what the kubelet API turned away.
	apiMetrics *kubeletapi.Metrics
	// stopCerts ends the renewal of the node's client certificate; Run calls it on
	// the way out.
	stopCerts func()
}

// New builds the node: it connects to the API server and constructs the provider,
// but starts nothing.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Every part of the node makes a logger of its own With its name.
	cfg.Logger = slog.New(deferAttrs(cfg.Logger.Handler()))
	if cfg.NodeName == "" {
		return nil, errors.New("a node name is required (--nodename)")
	}
	if err := checkLoopback(cfg.MetricsAddr); err != nil {
		return nil, err
	}
	var (
		client      kubernetes.Interface
		apiRequests *prometheus.CounterVec
		restCfg     *rest.Config
		// stopCerts ends the renewal of a client certificate of the node's
		// own; a node on the process's shared client has none to renew, and
		// no context for it (a NodeSet's thousand nodes would keep one each).
		stopCerts = func() {}
	)
	defer func() {
		if err != nil {
			stopCerts()
		}
	}()
	// What the API server has of what the node writes: read before anything
	// is built, as the node refuses a server it cannot run against.
	features := cfg.APIFeatures
	if cfg.Shared != nil {
		if err := checkShared(cfg); err != nil {
			return nil, err
		}
		client = cfg.Shared.client
		if features == nil {
			features = cfg.Shared.features
		}
	} else {
		certCtx, stop := context.WithCancel(context.Background())
		stopCerts = stop
		if restCfg, err = clientConfig(ctx, certCtx, cfg); err != nil {
			return nil, err
		}
		apiRequests = prometheus.NewCounterVec(apiRequestsOpts, []string{"verb", "resource"})
		if restCfg, err = apiClientConfig(restCfg, cfg, apiRequests); err != nil {
			return nil, err
		}
		if client, err = kubernetes.NewForConfig(restCfg); err != nil {
			return nil, err
		}
		if features, err = configuredFeatures(ctx, cfg, restCfg.Host, client); err != nil {
			return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
		}
	}
	if cfg.ServingCSRApprover, err = servingApprover(cfg); err != nil {
		return nil, err
	}
	providers := cfg.Providers
	if providers == nil {
		providers = registry.Builtin()
	}
	p, err := providers.New(ctx, cfg.Provider, registry.InitConfig{
		NodeName: cfg.NodeName, ConfigPath: cfg.ProviderConfig, InternalIP: cfg.InternalIP, Client: client, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, client: client, provider: p,
		log: cfg.Logger.With("node", cfg.NodeName), stopCerts: stopCerts}
	n.unready.Store(partsOfANode)
	var metrics *pod.Metrics
	if cfg.Shared != nil {
		n.gatherer, metrics, n.apiMetrics = cfg.Shared.registry, cfg.Shared.podMetrics, cfg.Shared.apiMetrics
	} else {
		registry := prometheus.NewRegistry()
		metrics, n.apiMetrics = pod.NewMetrics(), kubeletapi.NewMetrics()
		registry.MustRegister(processMetrics(apiRequests)...)
		if err := metrics.Register(registry); err != nil {
			return nil, err
		}
		if err := n.apiMetrics.Register(registry); err != nil {
			return nil, err
		}
		n.gatherer = registry
	}

	n.kubeletListener = cfg.KubeletListener
	if n.kubeletListener == nil {
		addr := net.JoinHostPort(listenHost(cfg), strconv.Itoa(int(cfg.KubeletPort)))
		n.kubeletListener, err = net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("kubelet API port %s: %w", addr, err)
		}
	}
	defer func() {
		if err != nil {
			n.kubeletListener.Close()
		}
	}()
	cfg.KubeletPort = int32(n.kubeletListener.Addr().(*net.TCPAddr).Port)
	n.cfg.KubeletPort = cfg.KubeletPort

	// Whether the client is a node identity (which may read its certificate from
	// disk): the node controller and the pod watch both depend on it.
	isNode := restCfg != nil && asNode(restCfg)
	var (
		nodeWatch *node.Watch
		timer     *sharedtimer.Timer
	)
	if cfg.Shared != nil {
		nodeWatch, timer = cfg.Shared.nodes, cfg.Shared.timer
	}
	n.nodes, err = node.NewController(node.Config{
		Watch: nodeWatch, Timer: timer,
		Client: client, NodeName: cfg.NodeName, ProviderName: cfg.Provider, DisableTaint: cfg.DisableTaint,
		AsNode:          isNode,
		OperatingSystem: cfg.OperatingSystem, InternalIP: cfg.InternalIP, KubeletPort: cfg.KubeletPort,
		KubeletVersion: version.KubeletVersion(), Provider: p,
		LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, Logger: cfg.Logger,
		Labels: cfg.NodeLabels, Taints: cfg.NodeTaints, Capacity: cfg.NodeCapacity,
		OnReady: n.partReady, APIFeatures: features,
	})
	if err != nil {
		return nil, err
	}
	cfg.Tracing.NodeName = cfg.NodeName
	tp, stopTracing, err := tracing.Setup(ctx, cfg.Tracing)
	if err != nil {
		return nil, err
	}
	n.stopTracing = stopTracing
	scope, err := podWatchScope(cfg.PodWatch, isNode)
	if err != nil {
		return nil, err
	}
	podCfg := pod.Config{
		Client: client, NodeName: cfg.NodeName, Provider: p, Workers: cfg.PodSyncWorkers, PodWatch: scope,
		OperatingSystem:    cfg.OperatingSystem,
		StatusWorkers:      cfg.PodStatusWorkers,
		StatusPollInterval: cfg.StatusPollInterval, ResyncPeriod: cfg.FullResyncPeriod, RemoveUnconfirmedAfter: cfg.RemoveUnconfirmedAfter,
		Metrics: metrics, Logger: cfg.Logger, Tracer: tp.Tracer("github.com/vkubelet/vkubelet/pod"),
		OnReady: n.partReady, APIFeatures: features,
	}
	if cfg.Shared != nil {
		podCfg.Recorder, podCfg.Source, podCfg.Caches, podCfg.Timer = cfg.Shared.recorder(cfg.NodeName), cfg.Shared.pods, cfg.Shared.caches, cfg.Shared.timer
	}
	if n.pods, err = pod.NewController(podCfg); err != nil {
		return nil, err
	}
	return n, nil
}

// closeProvider releases what a provider holds (connections, workers) once its
// node has stopped; the pods it runs go on running.
func closeProvider(p any) {
	switch c := p.(type) {
	case interface{ Close() error }:
		_ = c.Close()
	case interface{ Close() }:
		c.Close()
	}
}

// Client is the node's API client.
func (n *Node) Client() kubernetes.Interface { return n.client }

// Provider is the node's provider.
func (n *Node) Provider() any { return n.provider }

// Run runs the node until ctx ends. ready, if not nil, is called once the node is
// registered and the pod controller has reconciled with the provider. A node that is
// not ready within StartupTimeout (if set) is an error.
func (n *Node) Run(ctx context.Context, ready func()) error {
	defer closeProvider(n.provider) // last: once nothing calls it any more
	defer n.stopCerts()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.stopTracing(ctx); err != nil {
			n.log.Warn("sending the last spans", "error", err)
		}
	}()
	// One context for the node's goroutines, ended by the first of them to
	// fail, as errgroup.WithContext would, without a second layer of context
	// under this one: a NodeSet holds a context and its children's map per layer
	// per node for good.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n.onReady = ready
	var g errgroup.Group
	goOrCancel := func(run func() error) {
		g.Go(func() error {
			err := run()
			if err != nil {
				cancel()
			}
			return err
		})
	}
	goOrCancel(func() error { return n.nodes.Run(ctx) })
	goOrCancel(func() error { return n.serveKubeletAPI(ctx) })
	for _, plain := range []struct {
		addr, what string
		handler    http.Handler
	}{
		{n.cfg.MetricsAddr, "agent metrics and profiles (loopback only)", n.metricsHandler()},
		{n.cfg.HealthzAddr, "health and readiness", n.healthzHandler()},
	} {
		if plain.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", plain.addr)
		if err != nil {
			cancel()
			_ = g.Wait()
			return fmt.Errorf("%s endpoint: %w", plain.what, err)
		}
		srv := &http.Server{Handler: plain.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		goOrCancel(func() error {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error { <-ctx.Done(); return srv.Close() })
		n.log.Info("serving "+plain.what, "addr", l.Addr().String())
	}
	// Readiness is counted (partReady) rather than waited on: a goroutine
	// waiting for the three parts would be one more per node while a NodeSet
	// starts, and the runtime keeps every goroutine's descriptor (about 500
	// bytes) for reuse, never frees it.
	var timedOut atomic.Bool
	if n.cfg.StartupTimeout > 0 {
		t := time.AfterFunc(n.cfg.StartupTimeout, func() {
			for {
				left := n.unready.Load()
				if left <= 0 {
					return
				}
				if n.unready.CompareAndSwap(left, -partsOfANode) { // never 0 again
					timedOut.Store(true)
					cancel()
					return
				}
			}
		})
		defer t.Stop()
	}
	startupErr := func(err error) error {
		if timedOut.Load() {
			return fmt.Errorf("node %s not ready within the startup timeout of %s", n.cfg.NodeName, n.cfg.StartupTimeout)
		}
		return err
	}
	// The pod controller runs in this goroutine rather than in one of its own
	// while this one waits: a goroutine fewer per node.
	if err := n.pods.Run(ctx); err != nil {
		cancel()
		_ = g.Wait()
		return startupErr(err)
	}
	return startupErr(g.Wait())
}

// partsOfANode is how many parts call partReady, once each: the node
// controller, the pod controller and the kubelet API.
const partsOfANode = 3

// partReady is called once by each part of the node when it is ready (on
// the part's goroutine); the last one calls Run's ready.
func (n *Node) partReady() {
	if n.unready.Add(-1) != 0 {
		return
	}
	n.log.Info("virtual node ready", "provider", n.cfg.Provider)
	// Called once and let go: what it holds is its caller's to free.
	if ready := n.onReady; ready != nil {
		n.onReady = nil
		ready()
	}
}
