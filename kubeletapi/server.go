package kubeletapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// Config configures a Server.
type Config struct {
	NodeName string
	// Provider is asked for logs, exec, stats, … through the optional interfaces of
	// package provider. It must implement provider.PodLifecycleHandler for /pods.
	Provider any
	// Authenticator and Authorizer secure every route. Both are required: a kubelet
	// API without them would be a remote shell for anyone (see NewDelegatingAuth).
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// StreamIdleTimeout closes exec/attach/port-forward sessions idle this long
	// (default 4h, the kubelet's); StreamCreationTimeout bounds the stream handshake
	// (default 30s).
	StreamIdleTimeout     time.Duration
	StreamCreationTimeout time.Duration
	// The port's limits; zero takes the Default… of each (limits.go).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	MaxConnsPerClient int
	MaxConns          int
	// Metrics counts refused requests and connections; nil keeps them unregistered.
	Metrics *Metrics
	// Gatherer, if set, is the agent's own metrics, served at /metrics.
	Gatherer prometheus.Gatherer
	// Ready, if set, says whether the agent is ready (nil) or why not, for /readyz.
	Ready  func() error
	Logger *slog.Logger
}

// Server is the kubelet HTTPS API of one node.
type Server struct {
	cfg     Config
	handler http.Handler
	log     *slog.Logger
}

// NewServer builds the server's routes.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, errors.New("kubelet API: an authenticator and an authorizer are required")
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = 4 * time.Hour
	}
	if cfg.StreamCreationTimeout == 0 {
		cfg.StreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.ReadHeaderTimeout = orDefault(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	cfg.IdleTimeout = orDefault(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.MaxHeaderBytes = orDefault(cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	cfg.MaxConnsPerClient = orDefault(cfg.MaxConnsPerClient, DefaultMaxConnsPerClient)
	cfg.MaxConns = orDefault(cfg.MaxConns, DefaultMaxConns)
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "kubelet-api", "node", cfg.NodeName)}
	routes := theRoutes()
	s.handler = s.withAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routes.ServeHTTP(w, r.WithContext(withServer(r.Context(), s)))
	}))
	return s, nil
}

// upgradable guards a streaming route: the SPDY and WebSocket upgrades take the
// connection over, which only an HTTP/1.1 connection allows. An upgrade request
// on any other (an HTTP/2 stream) is refused with 400 instead of reaching code
// that assumes it can take the connection (found by FuzzStreamUpgrades: a panic).
func upgradable(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Hijacker); !ok && httpstream.IsUpgradeRequest(r) {
			http.Error(w, "streaming needs an HTTP/1.1 connection that can be upgraded", http.StatusBadRequest)
			return
		}
		next(w, r)
	}
}

func orDefault[T time.Duration | int](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Handler is the authenticated, authorized API.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves HTTPS on l, presenting cert's certificate, until ctx ends, on a
// Port of its own. Client certificates are requested but not required, so
// bearer tokens work too.
func (s *Server) Serve(ctx context.Context, l net.Listener, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	p := NewPort(PortConfig{ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout,
		MaxHeaderBytes: s.cfg.MaxHeaderBytes, Logger: s.cfg.Logger})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	err := p.Serve(ctx, s, l, cert)
	cancel()
	if runErr := <-done; err == nil {
		err = runErr
	}
	return err
}

// httpError writes err with the status its class calls for.
func (s *Server) httpError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errdefs.IsNotFound(err):
		code = http.StatusNotFound
	case errdefs.IsInvalidInput(err):
		code = http.StatusBadRequest
	case errdefs.IsNotImplemented(err):
		code = http.StatusNotImplemented
	}
	if code == http.StatusInternalServerError {
		s.log.Warn("request failed", "path", r.URL.Path, "error", err)
	}
	http.Error(w, err.Error(), code)
}

// notImplemented answers for a provider that lacks the interface a route needs.
func (s *Server) notImplemented(w http.ResponseWriter, r *http.Request, what string) {
	s.httpError(w, r, errdefs.NotImplemented("provider does not support %s", what))
}

func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.ContainerLogsProvider)
	if !ok {
		s.notImplemented(w, r, "container logs")
		return
	}
	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		s.httpError(w, r, errdefs.AsInvalidInput(err))
		return
	}
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	logs, err := p.GetContainerLogs(r.Context(), ns, pod, container, opts)
	if err != nil {
		s.httpError(w, r, fmt.Errorf("logs of %s/%s/%s: %w", ns, pod, container, err))
		return
	}
	defer logs.Close()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// Flush every chunk so `kubectl logs -f` sees lines as they come.
	out := io.Writer(w)
	if f, ok := w.(http.Flusher); ok && opts.Follow {
		out = flushWriter{w, f}
		f.Flush()
	}
	if _, err := io.Copy(out, logs); err != nil && r.Context().Err() == nil {
		s.log.Debug("log stream ended", "pod", ns+"/"+pod, "error", err)
	}
}

type flushWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	fw.f.Flush()
	return n, err
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.ContainerExecProvider)
	if !ok {
		s.notImplemented(w, r, "exec")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		s.httpError(w, r, errdefs.AsInvalidInput(err))
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		s.httpError(w, r, errdefs.InvalidInput("exec needs a command"))
		return
	}
	ns := r.PathValue("namespace")
	remotecommand.ServeExec(w, r, execAdapter{ns: ns, p: p}, r.PathValue("pod"), r.PathValue("uid"),
		r.PathValue("container"), cmd, opts, s.cfg.StreamIdleTimeout, s.cfg.StreamCreationTimeout,
		remotecommand.SupportedStreamingProtocols)
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.ContainerAttachProvider)
	if !ok {
		s.notImplemented(w, r, "attach")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		s.httpError(w, r, errdefs.AsInvalidInput(err))
		return
	}
	remotecommand.ServeAttach(w, r, attachAdapter{ns: r.PathValue("namespace"), p: p}, r.PathValue("pod"),
		r.PathValue("uid"), r.PathValue("container"), opts, s.cfg.StreamIdleTimeout, s.cfg.StreamCreationTimeout,
		remotecommand.SupportedStreamingProtocols)
}

func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.PortForwardProvider)
	if !ok {
		s.notImplemented(w, r, "port-forward")
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		s.httpError(w, r, errdefs.AsInvalidInput(err))
		return
	}
	portforward.ServePortForward(w, r, portForwardAdapter{ns: r.PathValue("namespace"), p: p}, r.PathValue("pod"),
		r.PathValue("uid"), opts, s.cfg.StreamIdleTimeout, s.cfg.StreamCreationTimeout, portforward.SupportedProtocols)
}

func (s *Server) statsSummary(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.StatsProvider)
	if !ok {
		s.notImplemented(w, r, "stats")
		return
	}
	summary, err := p.GetStatsSummary(r.Context())
	if err != nil {
		s.httpError(w, r, fmt.Errorf("stats summary: %w", err))
		return
	}
	writeJSON(w, summary)
}

func (s *Server) metricsResource(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.ResourceMetricsProvider)
	if !ok {
		s.notImplemented(w, r, "resource metrics")
		return
	}
	families, err := p.GetMetricsResource(r.Context())
	if err != nil {
		s.httpError(w, r, fmt.Errorf("resource metrics: %w", err))
		return
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	enc := expfmt.NewEncoder(w, format)
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			s.log.Warn("encoding resource metrics", "family", mf.GetName(), "error", err)
			return
		}
	}
}

func (s *Server) pods(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.PodLifecycleHandler)
	if !ok {
		s.notImplemented(w, r, "pod listing")
		return
	}
	pods, err := p.GetPods(r.Context())
	if err != nil {
		s.httpError(w, r, fmt.Errorf("listing pods: %w", err))
		return
	}
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, pod := range pods {
		list.Items = append(list.Items, *pod)
	}
	writeJSON(w, &list)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
