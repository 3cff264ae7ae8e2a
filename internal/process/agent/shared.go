package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
	"github.com/vkubelet/vkubelet/kubeletapi"
	"github.com/vkubelet/vkubelet/node"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/resolve"
)

// Shared is what the nodes of one process share instead of each making its own:
// the API client (one connection pool, one rate limiter, so --kube-api-qps and
// --kube-api-burst bound the process, not each node), the Event broadcaster, the
// pod watch (pod.Source), the Node watch (node.Watch), the caches of the objects
// pods reference (resolve.Caches), the timer of the pod queues' delayed adds
// (sharedtimer), the kubelet API's HTTP server (kubeletapi.Port), its
// authenticator and authorizer, and the
// metrics: the process's, and the nodes' pod controllers' and kubelet APIs'
// summed over them (a thousand nodes' series each would cost more than the
// nodes). internal/process/fleet makes one for a NodeSet whose nodes use one
// credential. Nodes with identities of their own (Config.OwnIdentity) cannot
// share a client, and each keeps its own machinery.
type Shared struct {
	client kubernetes.Interface
	events record.EventBroadcaster
	pods   *pod.Source
	nodes  *node.Watch
	caches *resolve.Caches
	timer  *sharedtimer.Timer
	// port serves the nodes' kubelet APIs: one HTTP server, each node on its
	// own socket.
	port *kubeletapi.Port
	// The nodes' pod controller and kubelet API metrics, summed over them.
	podMetrics *pod.Metrics
	apiMetrics *kubeletapi.Metrics
	// registry holds every metric: the process's (processMetrics) and the
	// nodes' summed; each node's kubelet port serves it.
	registry *prometheus.Registry
	// features are the API server's features, read once for the nodes.
	features *apifeatures.Set

	// ctx ends when Run returns: what the shared machinery starts on demand
	// (the kubelet API's client-CA watch) stops with it.
	ctx  context.Context
	stop context.CancelFunc
	// The kubelet API's authenticator and authorizer, with their caches of the
	// API server's answers: built by the first node that serves (kubeletAuth).
	authMu sync.Mutex
	authn  authenticator.Request
	authz  authorizer.Authorizer
}

// NewShared builds the shared machinery of nodes configured from base (its
// credential, client settings and resync period); nothing runs until Run.
func NewShared(ctx context.Context, base Config) (*Shared, error) {
	if base.OwnIdentity() {
		return nil, errors.New("nodes with identities of their own (a bootstrap credential) cannot share a client")
	}
	if base.PodWatch == string(pod.WatchNodePods) {
		return nil, errors.New("--pod-watch=node: the nodes of a NodeSet on one credential share one watch of every bound pod; give each node an identity of its own (--bootstrap-kubeconfig) to watch per node")
	}
	restCfg, err := clientConfig(ctx, ctx, base)
	if err != nil {
		return nil, err
	}
	if asNode(restCfg) {
		return nil, errors.New("the credential is a node's own (system:node:…): it acts for that node only, and cannot be shared")
	}
	apiRequests := prometheus.NewCounterVec(apiRequestsOpts, []string{"verb", "resource"})
	base.NodeName = "shared by the process's nodes"
	if restCfg, err = apiClientConfig(restCfg, base, apiRequests); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	features, err := configuredFeatures(ctx, base, restCfg.Host, client)
	if err != nil {
		return nil, err
	}
	pods, err := pod.NewSource(client, base.FullResyncPeriod)
	if err != nil {
		return nil, err
	}
	nodes, err := node.NewWatch(client)
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(processMetrics(apiRequests)...)
	podMetrics, kubeletMetrics := pod.NewNodesMetrics(), kubeletapi.NewMetrics()
	if err := podMetrics.Register(registry); err != nil {
		return nil, err
	}
	if err := kubeletMetrics.Register(registry); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	return &Shared{ctx: runCtx, stop: stop, client: client, events: record.NewBroadcaster(), pods: pods, nodes: nodes,
		caches: resolve.NewCaches(client), timer: sharedtimer.New(nil), registry: registry,
		port:       kubeletapi.NewPort(kubeletapi.PortConfig{Logger: base.Logger}),
		podMetrics: podMetrics, apiMetrics: kubeletMetrics, features: features}, nil
}

// Run writes the nodes' Events, watches their pods and Nodes and serves their
// kubelet APIs until ctx ends.
func (s *Shared) Run(ctx context.Context) {
	defer s.stop()
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	defer s.events.Shutdown()
	var wg sync.WaitGroup
	runPort := func(ctx context.Context) { _ = s.port.Run(ctx) }
	for _, run := range []func(context.Context){s.nodes.Run, s.timer.Run, runPort} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	s.pods.Run(ctx)
	wg.Wait()
}

// kubeletAuth returns the nodes' kubelet API authenticator and authorizer,
// built by build the first time it succeeds (with a context that ends with Run). A
// thousand nodes share one client-CA watch and one cache of TokenReview and
// SubjectAccessReview answers, as the requests they authorize come from the
// same few clients (the API server, metrics-server, Prometheus).
func (s *Shared) kubeletAuth(build func(context.Context) (authenticator.Request, authorizer.Authorizer, error)) (authenticator.Request, authorizer.Authorizer, error) {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.authn == nil {
		authn, authz, err := build(s.ctx)
		if err != nil {
			return nil, nil, err
		}
		s.authn, s.authz = authn, authz
	}
	return s.authn, s.authz, nil
}

// recorder records Events as node's.
func (s *Shared) recorder(node string) record.EventRecorder {
	return s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vkubelet", Host: node})
}

// checkShared refuses a node configuration that cannot use shared machinery.
func checkShared(cfg Config) error {
	if cfg.OwnIdentity() {
		return fmt.Errorf("node %s: a node with an identity of its own cannot use the process's shared client", cfg.NodeName)
	}
	return nil
}

// ServeDebug serves the metrics (those each node's kubelet port serves too) and
// the process's profiles on addr, a loopback address, until ctx ends:
// --metrics-addr of a NodeSet, for local debugging and vkubeletctl bench.
func (s *Shared) ServeDebug(ctx context.Context, addr string) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: debugHandler(s.registry), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(l) }()
	return nil
}
