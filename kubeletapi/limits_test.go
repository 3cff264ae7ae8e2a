package kubeletapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	certutil "k8s.io/client-go/util/cert"
)

// servedAt serves a Server built with cfg (test auth filled in) over TLS on
// 127.0.0.1 and returns its address.
func servedAt(t *testing.T, cfg Config) (string, *Server) {
	t.Helper()
	auth := &fixedAuth{allow: func(a authorizer.Attributes) bool { return a.GetPath() != "/pods" }} // /pods: 403
	cfg.NodeName, cfg.Authenticator, cfg.Authorizer = "n1", auth, authorizer.AuthorizerFunc(auth.Authorize)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("n1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ctx, l, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l.Addr().String(), s
}

// closedWithin reports whether the server closes c within d (read hits EOF or a reset).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1024)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

func TestAnIdleConnectionIsClosedAfterOneRequest(t *testing.T) {
	addr, _ := servedAt(t, Config{IdleTimeout: 300 * time.Millisecond})
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One anonymous request, answered 401, then silence on a kept-alive connection.
	if _, err := io.WriteString(c, "GET /pods HTTP/1.1\r\nHost: n1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil || !bytes.Contains(buf[:n], []byte("401")) {
		t.Fatalf("answer %q (%v), want a 401", buf[:n], err)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Error("an idle connection stayed open 5 s after its one request; want it closed after the idle timeout")
	}
}

func TestAClientThatSendsNothingIsCut(t *testing.T) {
	addr, _ := servedAt(t, Config{ReadHeaderTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr) // no TLS handshake, nothing at all
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedWithin(c, 5*time.Second) {
		t.Error("a silent connection stayed open 5 s; want it cut after the read-header timeout")
	}
}

func TestConnectionsPerClientAreCapped(t *testing.T) {
	m := NewMetrics()
	addr, _ := servedAt(t, Config{MaxConnsPerClient: 3, Metrics: m})
	var open []*tls.Conn
	for range 3 {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	// The fourth is closed at once: its handshake fails.
	if c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Fatal("a fourth connection from the same client was accepted; want it closed at once")
	}
	if n := testutil.ToFloat64(m.refusedConns); n != 1 {
		t.Errorf("connections_refused_total = %v, want 1", n)
	}
	// Once one closes, a new one is welcome.
	open[0].Close()
	eventually.TrueEvery(t, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return false, fmt.Sprintf("no connection accepted after one of three closed: %v", err)
		}
		c.Close()
		return true, ""
	})
	for _, c := range open[1:] {
		c.Close()
	}
}

func TestDenialsAreCountedAndNotLoggedAtInfo(t *testing.T) {
	var logs bytes.Buffer
	m := NewMetrics()
	addr, _ := servedAt(t, Config{Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for token, want := range map[string]int{"": 401, "good": 403} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/pods", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("token %q: status %d, want %d", token, resp.StatusCode, want)
		}
	}
	if n := testutil.ToFloat64(m.denied.WithLabelValues("401", "proxy")); n != 1 {
		t.Errorf("denied{401} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.denied.WithLabelValues("403", "proxy")); n != 1 {
		t.Errorf("denied{403} = %v, want 1", n)
	}
	if strings.Contains(logs.String(), "forbidden") {
		t.Errorf("a denial was logged at info:\n%s", logs.String())
	}
}

// TestEveryPathRefusesAnonymousUnauthorizedAndPlainHTTP checks the table of
// docs/RELIABILITY.md: for every route of the kubelet API, no credentials → 401,
// credentials without the right → 403, plain HTTP → refused before any handler.
func TestEveryPathRefusesAnonymousUnauthorizedAndPlainHTTP(t *testing.T) {
	auth := &fixedAuth{allow: func(authorizer.Attributes) bool { return false }}
	s, err := NewServer(Config{NodeName: "n1", Authenticator: auth, Authorizer: authorizer.AuthorizerFunc(auth.Authorize),
		Gatherer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("n1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ctx, l, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })
	}()
	defer func() { cancel(); <-done }()
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	plainClient := &http.Client{}

	paths := []struct{ method, path string }{
		{"GET", "/containerLogs/ns/p/c"}, {"POST", "/exec/ns/p/c"}, {"POST", "/exec/ns/p/uid/c"},
		{"POST", "/attach/ns/p/c"}, {"POST", "/attach/ns/p/uid/c"}, {"POST", "/portForward/ns/p"},
		{"POST", "/portForward/ns/p/uid"}, {"GET", "/stats/summary"}, {"GET", "/metrics/resource"},
		{"GET", "/pods"}, {"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/runningpods/"}, {"GET", "/metrics"},
		{"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/heap"}, {"GET", "/no/such/path"},
	}
	status := func(c *http.Client, scheme, method, path, token string) (int, string) {
		req, _ := http.NewRequest(method, scheme+"://"+l.Addr().String()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, string(b)
	}
	for _, p := range paths {
		if code, _ := status(tlsClient, "https", p.method, p.path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s anonymous: %d, want 401", p.method, p.path, code)
		}
		if code, _ := status(tlsClient, "https", p.method, p.path, "good"); code != http.StatusForbidden {
			t.Errorf("%s %s without permission: %d, want 403", p.method, p.path, code)
		}
		// Go's TLS server answers a plain HTTP request with a 400 of its own and
		// closes: no handler runs.
		if code, body := status(plainClient, "http", p.method, p.path, "good"); code != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
			t.Errorf("%s %s over plain HTTP: %d %q, want refused (400, HTTPS needed)", p.method, p.path, code, body)
		}
	}
}
