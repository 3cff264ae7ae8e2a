// Package agent wires a virtual node together: API client, provider, node
// controller, pod controller and the agent's own metrics endpoint. It is the only
// package besides the CLI that knows every other one; `vkubelet` and `vkubelet up`
// call Run.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/process/tracing"
	"github.com/vkubelet/vkubelet/internal/version"
	"github.com/vkubelet/vkubelet/kubeletapi"
	"github.com/vkubelet/vkubelet/node"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/servingcert"
)

// Config is everything a node process is configured with; the CLI fills it from flags.
type Config struct {
	NodeName       string
	Provider       string
	ProviderConfig string
	// Kubeconfig is the path of the kubeconfig; "" uses in-cluster config.
	Kubeconfig string
	// RESTConfig, when set, is used instead of Kubeconfig (in-process callers).
	RESTConfig *rest.Config
	// BootstrapKubeconfig, as the kubelet's --bootstrap-kubeconfig: unless
	// Kubeconfig names an existing file, the node authenticates as itself
	// (system:node:<name>) with a client certificate kept in CertDir, asked for
	// with this kubeconfig's credential when there is none (TLS bootstrap) and
	// renewed before it expires; Kubeconfig, if given, is then written to use it.
	// BootstrapRESTConfig is the same for in-process callers.
	BootstrapKubeconfig string
	BootstrapRESTConfig *rest.Config
	// ServingCSRApprover, if set, approves the node's own serving CSR
	// (ApproveServingCSR) in place of the node's credential, which a node identity
	// may not use for approving.
	ServingCSRApprover *rest.Config

	OperatingSystem string
	InternalIP      string
	KubeletPort     int32
	DisableTaint    bool
	PodSyncWorkers  int
	// PodStatusWorkers write pod statuses; 0 takes the pod controller's default.
	PodStatusWorkers int
	// PodWatch is what a node with a client of its own watches (--pod-watch):
	// "node", "bound", or "auto" ("" too): "node" for a node identity, "bound"
	// while the API server allows it for other credentials (podWatchScope).
	PodWatch         string
	FullResyncPeriod time.Duration
	// StatusPollInterval is how often a provider without a notifier is polled.
	StatusPollInterval time.Duration
	StartupTimeout     time.Duration
	ClusterDomain      string
	// MetricsAddr is a loopback address serving the agent's metrics and profiles
	// without authentication, for local debugging and vkubelet bench; "" disables
	// it. Elsewhere /metrics is scraped on the kubelet port, authorized as
	// nodes/metrics.
	MetricsAddr string
	// HealthzAddr serves /healthz and /readyz alone, without authentication, on
	// any address: for liveness and readiness probes, which carry no credentials,
	// as the kubelet's healthz port does. "" disables it.
	HealthzAddr string
	KubeAPIQPS  float32
	// KubeAPIContentType is the encoding of requests and answers
	// (--kube-api-content-type); "" means protobuf, as for the kubelet.
	KubeAPIContentType string
	KubeAPIBurst       int
	LeaseDuration      time.Duration
	RenewInterval      time.Duration

	// The kubelet API (HTTPS on KubeletPort; 0 picks a free port, which the node
	// then advertises). Its certificate: ServingCertFile/KeyFile, else self-signed
	// if SelfSignedServingCert, else a kubelet-serving CSR (approved by the node
	// itself if ApproveServingCSR) kept in CertDir.
	ServingCertFile, ServingKeyFile string
	SelfSignedServingCert           bool
	ApproveServingCSR               bool
	CertDir                         string
	// StreamIdleTimeout and StreamCreationTimeout bound exec, attach and
	// port-forward sessions (idle, and their handshake); zero: the kubelet's 4h
	// and 30s.
	StreamIdleTimeout, StreamCreationTimeout time.Duration
	// How long the kubelet API caches TokenReview answers and allowed and denied
	// SubjectAccessReviews; zero: the kubelet's 2m, 5m and 30s.
	TokenCacheTTL, AllowCacheTTL, DenyCacheTTL time.Duration
	// ClientCAFile authenticates client certificates (the API server's); empty
	// reads the cluster's client CA from kube-system/extension-apiserver-authentication.
	ClientCAFile string
	// NodeLabels, NodeTaints and NodeCapacity are the operator's additions to the
	// node (a NodeSet file's labels, taints and capacity); see node.Config.
	NodeLabels   map[string]string
	NodeTaints   []corev1.Taint
	NodeCapacity corev1.ResourceList
	// Tracing says where spans of pod syncs, provider calls and status writes go
	// (OTLP); off unless an endpoint is set here or in the OTEL_* variables.
	Tracing tracing.Config

	// ListenAddress is the IP the kubelet API listens on; empty: InternalIP, the
	// address the node advertises ("0.0.0.0" or "::" listen on every address).
	ListenAddress string
	// KubeletListener, if set, is where the kubelet API listens instead of
	// KubeletPort (for instance a socket in a network namespace, see internal/lab/netns).
	KubeletListener net.Listener
	// Shared, if set, is the machinery the node shares with the other nodes of
	// the process (NewShared): its client, and so its credential, watches,
	// caches and metrics.
	Shared *Shared

	Logger *slog.Logger
}

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
	// apiReady is closed once the kubelet API serves (it may wait for its certificate).
	apiReady chan struct{}
	// stopTracing sends the spans still buffered; Run calls it on the way out.
	stopTracing func(context.Context) error
	// apiMetrics count what the kubelet API turned away.
	apiMetrics *kubeletapi.Metrics
	// stopCerts ends the renewal of the node's client certificate; Run calls it on
	// the way out.
	stopCerts context.CancelFunc
}

// listenHost is the host the kubelet API listens on: the configured listen
// address, else the address the node advertises, so that a node does not open its
// port on every interface unless told to.
func listenHost(cfg Config) string {
	if cfg.ListenAddress != "" {
		return cfg.ListenAddress
	}
	return cfg.InternalIP
}

// New builds the node: it connects to the API server and constructs the provider,
// but starts nothing.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeName == "" {
		return nil, errors.New("a node name is required (--nodename)")
	}
	if err := checkLoopback(cfg.MetricsAddr); err != nil {
		return nil, err
	}
	certCtx, stopCerts := context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			stopCerts()
		}
	}()
	var (
		client      kubernetes.Interface
		apiRequests *prometheus.CounterVec
		restCfg     *rest.Config
	)
	if cfg.Shared != nil {
		if err := checkShared(cfg); err != nil {
			return nil, err
		}
		client = cfg.Shared.client
	} else {
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
	}
	if cfg.ServingCSRApprover, err = servingApprover(cfg); err != nil {
		return nil, err
	}
	p, err := registry.New(ctx, cfg.Provider, registry.InitConfig{
		NodeName: cfg.NodeName, ConfigPath: cfg.ProviderConfig, InternalIP: cfg.InternalIP, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, client: client, provider: p,
		log: cfg.Logger.With("node", cfg.NodeName), apiReady: make(chan struct{}), stopCerts: stopCerts}
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
	var nodeWatch *node.Watch
	if cfg.Shared != nil {
		nodeWatch = cfg.Shared.nodes
	}
	n.nodes, err = node.NewController(node.Config{
		Watch:  nodeWatch,
		Client: client, NodeName: cfg.NodeName, ProviderName: cfg.Provider, DisableTaint: cfg.DisableTaint,
		AsNode:          isNode,
		OperatingSystem: cfg.OperatingSystem, InternalIP: cfg.InternalIP, KubeletPort: cfg.KubeletPort,
		KubeletVersion: version.KubeletVersion(), Provider: p,
		LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, Logger: cfg.Logger,
		Labels: cfg.NodeLabels, Taints: cfg.NodeTaints, Capacity: cfg.NodeCapacity,
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
		StatusWorkers:      cfg.PodStatusWorkers,
		StatusPollInterval: cfg.StatusPollInterval, ResyncPeriod: cfg.FullResyncPeriod,
		Metrics: metrics, Logger: cfg.Logger, Tracer: tp.Tracer("github.com/vkubelet/vkubelet/pod"),
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.nodes.Run(ctx) })
	g.Go(func() error { return n.serveKubeletAPI(ctx) })
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
		g.Go(func() error {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error { <-ctx.Done(); return srv.Close() })
		n.log.Info("serving "+plain.what, "addr", l.Addr().String())
	}
	g.Go(func() error {
		var timeout <-chan time.Time
		if n.cfg.StartupTimeout > 0 {
			t := time.NewTimer(n.cfg.StartupTimeout)
			defer t.Stop()
			timeout = t.C
		}
		for _, ch := range []<-chan struct{}{n.nodes.Ready(), n.pods.Ready(), n.apiReady} {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil
			case <-timeout:
				return fmt.Errorf("node %s not ready within the startup timeout of %s", n.cfg.NodeName, n.cfg.StartupTimeout)
			}
		}
		n.log.Info("virtual node ready", "provider", n.cfg.Provider)
		if ready != nil {
			ready()
		}
		return nil
	})
	// The pod controller runs in this goroutine rather than in one of its own
	// while this one waits: a goroutine fewer per node.
	if err := n.pods.Run(ctx); err != nil {
		cancel()
		_ = g.Wait()
		return err
	}
	return g.Wait()
}

// KubeletPort is the port the kubelet API listens on.
func (n *Node) KubeletPort() int32 { return n.cfg.KubeletPort }

// serveKubeletAPI obtains the serving certificate and serves the kubelet API.
func (n *Node) serveKubeletAPI(ctx context.Context) error {
	defer n.kubeletListener.Close()
	var ips []net.IP
	if ip := net.ParseIP(n.cfg.InternalIP); ip != nil {
		ips = append(ips, ip)
	}
	var approver kubernetes.Interface
	if n.cfg.ServingCSRApprover != nil {
		var err error
		if approver, err = kubernetes.NewForConfig(n.cfg.ServingCSRApprover); err != nil {
			return err
		}
	}
	tlsCfg, err := servingcert.TLSConfig(ctx, servingcert.Config{
		CertFile: n.cfg.ServingCertFile, KeyFile: n.cfg.ServingKeyFile, SelfSigned: n.cfg.SelfSignedServingCert,
		NodeName: n.cfg.NodeName, IPs: ips, DNSNames: []string{n.cfg.NodeName},
		Client: n.client, Approver: approver, Dir: certDir(n.cfg), AutoApprove: n.cfg.ApproveServingCSR, Logger: n.log,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kubelet API: %w", err)
	}
	authn, authz, err := n.kubeletAuth(ctx)
	if err != nil {
		return err
	}
	srv, err := kubeletapi.NewServer(kubeletapi.Config{
		NodeName: n.cfg.NodeName, Provider: n.provider, Authenticator: authn, Authorizer: authz, Logger: n.log,
		Metrics: n.apiMetrics, Gatherer: n.gatherer, Ready: n.ready,
		StreamIdleTimeout: n.cfg.StreamIdleTimeout, StreamCreationTimeout: n.cfg.StreamCreationTimeout,
	})
	if err != nil {
		return err
	}
	close(n.apiReady)
	if n.cfg.Shared != nil {
		return n.cfg.Shared.port.Serve(ctx, srv, n.kubeletListener, tlsCfg)
	}
	return srv.Serve(ctx, n.kubeletListener, tlsCfg)
}

// kubeletAuth is the authenticator and authorizer of the kubelet API: the
// process's, shared by its nodes, or the node's own. They delegate to the API
// server (TokenReview, SubjectAccessReview) and cache its answers, and accept
// client certificates of the cluster's client CA.
func (n *Node) kubeletAuth(ctx context.Context) (authenticator.Request, authorizer.Authorizer, error) {
	build := func(ctx context.Context) (authenticator.Request, authorizer.Authorizer, error) {
		caFile := n.cfg.ClientCAFile
		if caFile == "" {
			var err error
			if caFile, err = n.clusterClientCA(ctx, certDir(n.cfg)); err != nil {
				n.log.Warn("no client CA: the kubelet API accepts bearer tokens only", "error", err)
			}
		}
		return kubeletapi.NewDelegatingAuth(ctx, kubeletapi.AuthConfig{Client: n.client, ClientCAFile: caFile,
			TokenCacheTTL: n.cfg.TokenCacheTTL, AllowCacheTTL: n.cfg.AllowCacheTTL, DenyCacheTTL: n.cfg.DenyCacheTTL})
	}
	if n.cfg.Shared != nil {
		return n.cfg.Shared.kubeletAuth(build)
	}
	return build(ctx)
}

// clusterClientCA writes the CA the API server trusts for client certificates,
// published in kube-system/extension-apiserver-authentication, to dir.
func (n *Node) clusterClientCA(ctx context.Context, dir string) (string, error) {
	cm, err := n.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ca := cm.Data["client-ca-file"]
	if ca == "" {
		return "", errors.New("extension-apiserver-authentication has no client-ca-file")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "client-ca.crt")
	return path, os.WriteFile(path, []byte(ca), 0o644)
}

func (n *Node) metricsHandler() http.Handler { return debugHandler(n.gatherer) }

// debugHandler serves the metrics of g, a health check and the process's
// profiles, unauthenticated: only ever on a loopback address (checkLoopback).
func debugHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Profiles of the agent, for measuring it (vkubelet bench).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

// apiClientConfig is base with the node's client settings: rate limits, encoding,
// user agent, and the request counter.
func apiClientConfig(base *rest.Config, cfg Config, apiRequests *prometheus.CounterVec) (*rest.Config, error) {
	restCfg := rest.CopyConfig(base)
	if cfg.KubeAPIQPS > 0 {
		restCfg.QPS = cfg.KubeAPIQPS
	}
	if cfg.KubeAPIBurst > 0 {
		restCfg.Burst = cfg.KubeAPIBurst
	}
	// Protobuf by default, as the kubelet: the API server encodes the node's watch
	// events and the answers to its writes in it, and the node decodes them, at a
	// fraction of JSON's cost (with JSON the agent took 19.9 CPU seconds instead of
	// 11.2 for 10,000 pods; vkubelet bench, docs/PERFORMANCE.md).
	ct := cfg.KubeAPIContentType
	switch ct {
	case "":
		ct = runtime.ContentTypeProtobuf
	case runtime.ContentTypeProtobuf, runtime.ContentTypeJSON:
	default:
		// client-go would accept it and fail every write: refuse it at start.
		return nil, fmt.Errorf("--kube-api-content-type %q: want %s or %s", ct, runtime.ContentTypeProtobuf, runtime.ContentTypeJSON)
	}
	restCfg.ContentType, restCfg.AcceptContentTypes = ct, ct
	if ct != runtime.ContentTypeJSON {
		restCfg.AcceptContentTypes = ct + "," + runtime.ContentTypeJSON
	}
	restCfg.UserAgent = "vkubelet/" + version.Version + " (" + cfg.NodeName + ")"
	restCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counter: apiRequests}
	})
	return restCfg, nil
}

// CheckPodWatch reports whether flag is a value of --pod-watch, before any node
// starts.
func CheckPodWatch(flag string) error {
	_, err := podWatchScope(flag, false)
	return err
}

// podWatchScope is the pod watch of a node with a client of its own, from
// --pod-watch and whether the client is a node identity, which the Node
// authorizer lets watch the node's own pods only.
func podWatchScope(flag string, asNode bool) (pod.WatchScope, error) {
	switch pod.WatchScope(flag) {
	case pod.WatchNodePods:
		return pod.WatchNodePods, nil
	case pod.WatchBoundPods:
		if asNode {
			return "", errors.New("--pod-watch=bound: the node's credential is a node identity (system:node:<name>), which the Node authorizer lets watch the node's own pods only; use auto or node, or a credential with list and watch of pods")
		}
		return pod.WatchBoundPods, nil
	case pod.WatchAuto, "":
		if asNode {
			return pod.WatchNodePods, nil
		}
		return pod.WatchAuto, nil
	}
	return "", fmt.Errorf("--pod-watch=%s: want auto, node or bound", flag)
}
