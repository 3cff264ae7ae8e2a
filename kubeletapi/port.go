package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Port serves the kubelet API of one or more nodes with one HTTP server: one
// set of timeouts, one connection-serving loop and one TLS configuration,
// presenting the certificate of whichever node a connection is for. Each node
// accepts on its own socket (Serve), so that its endpoint — the address and
// port the node advertises — says which node a request is for, for the
// node-level paths (/stats/summary, /metrics/resource, /pods) as much as for a
// pod's. A thousand nodes of one process share one Port; a node alone has its
// own (Server.Serve).
type Port struct {
	cfg   PortConfig
	srv   *http.Server
	conns chan *nodeConn
	// closed is closed once Run has ended: no connection is handed over after
	// it, and the nodes' sockets close.
	closed    chan struct{}
	closeOnce sync.Once
	// sockets are the nodes' sockets, closed with the port: listed here
	// rather than each watching closed with a context.AfterFunc, some 150
	// bytes a node more. nil once the port is closed.
	mu      sync.Mutex
	sockets map[net.Listener]struct{}
}

// PortConfig holds the limits that apply to every connection of a Port; zero
// takes the Default… of each (limits.go).
type PortConfig struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	Logger            *slog.Logger
}

// NewPort returns a port that serves nothing until Run.
func NewPort(cfg PortConfig) *Port {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.ReadHeaderTimeout = orDefault(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	cfg.IdleTimeout = orDefault(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.MaxHeaderBytes = orDefault(cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	p := &Port{cfg: cfg, conns: make(chan *nodeConn), closed: make(chan struct{}), sockets: map[net.Listener]struct{}{}}
	// No ReadTimeout or WriteTimeout: they would cut logs -f and the exec,
	// attach and port-forward streams, which have their own idle timeout
	// (StreamIdleTimeout). ReadHeaderTimeout also bounds the TLS handshake.
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serverOf(r.Context()).handler.ServeHTTP(w, r)
		}),
		// One configuration for every node, with each connection's node's
		// certificate: a tls.Config is some 500 bytes, kept for good for each
		// of a NodeSet's thousand nodes when it was one each. Client
		// certificates are requested but not required, as the kubelet's, since
		// a bearer token authenticates a client too.
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			ClientAuth: tls.RequestClientCert,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if nc, ok := hello.Conn.(*nodeConn); ok {
					return nc.node.cert(hello)
				}
				return nil, errors.New("a connection that came through no node's socket")
			},
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if nc, ok := tc.NetConn().(*nodeConn); ok {
					ctx, cancel := context.WithCancel(ctx)
					context.AfterFunc(nc.closed, cancel)
					return withServer(ctx, nc.node.server)
				}
			}
			return ctx
		},
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.With("component", "kubelet-api").Handler(), slog.LevelDebug),
	}
	return p
}

// Run serves the connections the nodes accept until ctx ends, then closes them.
func (p *Port) Run(ctx context.Context) error {
	p.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	errc := make(chan error, 1)
	go func() { errc <- p.srv.ServeTLS(portListener{p}, "", "") }()
	select {
	case err := <-errc:
		p.close()
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(shutdownCtx)
		_ = p.srv.Close()
		<-errc
		p.close()
		return nil
	}
}

// close tells the nodes' sockets that the port serves no more, and closes them.
func (p *Port) close() {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.mu.Lock()
		sockets := p.sockets
		p.sockets = nil
		p.mu.Unlock()
		for l := range sockets {
			_ = l.Close()
		}
	})
}

// track lists l among the sockets closed with the port; false if the port is
// closed already.
func (p *Port) track(l net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sockets == nil {
		return false
	}
	p.sockets[l] = struct{}{}
	return true
}

// untrack takes l off the list.
func (p *Port) untrack(l net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sockets, l)
}

// stopped reports whether the port is closed.
func (p *Port) stopped() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// acceptBackoff paces Accept after a failure that may pass (out of file
// descriptors, say), as net/http's Server does: from 5ms, doubling, up to 1s.
var acceptBackoff = wait.Backoff{Duration: 5 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: math.MaxInt32}

// accept returns l's next connection, trying again with back-off (acceptBackoff,
// from its start at each connection) while Accept fails other than for good: l
// closed, ctx ended or the port stopped (then the caller tells which).
func (p *Port) accept(ctx context.Context, s *Server, l net.Listener) (net.Conn, error) {
	var c net.Conn
	err := acceptBackoff.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		var err error
		c, err = l.Accept()
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil || p.stopped() || errors.Is(err, net.ErrClosed):
			return false, err
		}
		s.log.Warn("accepting a connection failed; retrying", "error", err)
		return false, nil
	})
	return c, err
}

// Serve accepts s's connections on l and has the port serve them, presenting
// cert's certificate, until ctx ends; then it closes l and s's connections,
// streams included. s's limits on connections (MaxConnsPerClient, MaxConns)
// apply to l alone.
func (p *Port) Serve(ctx context.Context, s *Server, l net.Listener, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	ep := &endpoint{server: s, cert: cert, open: map[*nodeConn]struct{}{}}
	limited := newLimitListener(l, s.cfg.MaxConnsPerClient, s.cfg.MaxConns, func(remote string) {
		s.cfg.Metrics.refusedConns.Inc()
		s.log.Debug("connection refused: too many open", "remote", remote)
	})
	// Closing the socket ends Accept below; no goroutine waits for it.
	closeSocket := func() { _ = l.Close() }
	defer context.AfterFunc(ctx, closeSocket)()
	if !p.track(l) {
		_ = l.Close()
		return errors.New("kubelet API: the port serving the node stopped")
	}
	defer p.untrack(l)
	defer ep.closeAll()
	s.log.Info("serving the kubelet API", "addr", l.Addr().String())
	for {
		c, err := p.accept(ctx, s, limited)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case p.stopped():
				return errors.New("kubelet API: the port serving the node stopped")
			}
			return fmt.Errorf("kubelet API socket closed: %w", err)
		}
		nc := ep.add(c)
		select {
		case p.conns <- nc:
		case <-ctx.Done():
			nc.Close()
			return nil
		case <-p.closed:
			nc.Close()
			return errors.New("kubelet API: the port serving the node stopped")
		}
	}
}

// endpoint is one node's part of a port: its Server, certificate and open
// connections.
type endpoint struct {
	server *Server
	cert   func(*tls.ClientHelloInfo) (*tls.Certificate, error)

	mu   sync.Mutex
	open map[*nodeConn]struct{}
}

// add tracks c, a connection Serve accepted (before its deferred closeAll).
func (e *endpoint) add(c net.Conn) *nodeConn {
	nc := &nodeConn{Conn: c, node: e}
	nc.closed, nc.markClosed = context.WithCancel(context.Background())
	e.mu.Lock()
	e.open[nc] = struct{}{}
	e.mu.Unlock()
	return nc
}

func (e *endpoint) forget(nc *nodeConn) {
	e.mu.Lock()
	delete(e.open, nc)
	e.mu.Unlock()
}

// closeAll closes the node's connections.
func (e *endpoint) closeAll() {
	e.mu.Lock()
	open := e.open
	e.open = nil
	e.mu.Unlock()
	for nc := range open {
		_ = nc.Conn.Close()
		nc.markClosed()
	}
}

// nodeConn is a connection accepted on a node's socket.
type nodeConn struct {
	net.Conn
	node *endpoint
	// closed ends when the connection is closed, by whoever closes it, and
	// the contexts of its requests with it (ConnContext). net/http ends them
	// only when it reads an error from the connection, which it may not do
	// once a stream took the connection over and the streaming library
	// closed it (StreamIdleTimeout): an exec whose command reads no stdin
	// and writes nothing would run on, told by nothing that its client is
	// gone (found by TestStreamIdleTimeoutClosesExecAndAttach).
	closed     context.Context
	markClosed context.CancelFunc
}

func (c *nodeConn) Close() error {
	err := c.Conn.Close()
	c.markClosed()
	c.node.forget(c)
	return err
}

// portListener hands the HTTP server the connections the nodes accepted.
type portListener struct{ p *Port }

func (l portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.conns:
		return c, nil
	case <-l.p.closed:
		return nil, net.ErrClosed
	}
}

func (l portListener) Close() error {
	l.p.close()
	return nil
}

func (l portListener) Addr() net.Addr { return portAddr{} }

// portAddr stands for the nodes' sockets, which have addresses of their own.
type portAddr struct{}

func (portAddr) Network() string { return "tcp" }
func (portAddr) String() string  { return "kubelet API sockets of the nodes" }
