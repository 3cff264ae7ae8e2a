package kubeletapi

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	httpstreamspdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/leakcheck"
	"github.com/vkubelet/vkubelet/provider"
)

// The tests of this file prove Config.StreamIdleTimeout: an exec, attach or
// port-forward session through which no SPDY frame passes for that long is
// closed, and the provider's side of it ends. The kubelet's default is 4 h; a
// session that is never closed holds goroutines, a connection (of the
// client's MaxConnsPerClient) and the provider's process for good.

// testStreamIdle is the StreamIdleTimeout of these tests: short so that each
// test takes a few seconds, and long enough that a loaded CI machine does not
// stall past it between two keep-alive writes (keepAliveEvery).
const (
	testStreamIdle = time.Second
	keepAliveEvery = 300 * time.Millisecond
	// closeBound is how long after the timeout a session may take to close
	// before a test calls it left open: generous, for a busy machine.
	closeBound = 10 * time.Second
)

// silentContainer is a provider whose exec, attach and port-forward sessions
// write nothing, as a shell waiting for a command does. It tells when each
// session starts and when, and why, it ends.
type silentContainer struct {
	// readsInput has a session read its input (stdin, or the forwarded
	// stream) until it closes. Without it a session ignores its input and
	// waits for its context alone, as a command that reads no stdin (sleep)
	// does: only the context can tell it that the client is gone.
	readsInput bool
	started    chan time.Time
	ended      chan sessionEnd
	received   atomic.Int64
}

// sessionEnd is when a provider-side session ended, and why.
type sessionEnd struct {
	at  time.Time
	why string
}

func newSilentContainer(readsInput bool) *silentContainer {
	return &silentContainer{readsInput: readsInput, started: make(chan time.Time, 1), ended: make(chan sessionEnd, 1)}
}

func (c *silentContainer) session(ctx context.Context, in io.Reader) error {
	c.started <- time.Now()
	if !c.readsInput {
		<-ctx.Done()
		c.ended <- sessionEnd{time.Now(), "its context ended"}
		return nil
	}
	buf := make([]byte, 512)
	for {
		n, err := in.Read(buf)
		c.received.Add(int64(n))
		if err != nil {
			c.ended <- sessionEnd{time.Now(), "its input closed"}
			return nil
		}
	}
}

func (c *silentContainer) RunInContainer(ctx context.Context, _, _, _ string, _ []string, attach provider.AttachIO) error {
	return c.session(ctx, attach.Stdin())
}

func (c *silentContainer) AttachToContainer(ctx context.Context, _, _, _ string, attach provider.AttachIO) error {
	return c.session(ctx, attach.Stdin())
}

// PortForward is told of the session's end by its stream alone: the
// port-forward library calls it with a context that never ends.
func (c *silentContainer) PortForward(ctx context.Context, _, _ string, _ int32, stream io.ReadWriteCloser) error {
	return c.session(ctx, stream)
}

// servedIdle serves p with the tests' idle timeout and returns the address
// once the port serves: its goroutines have all started, so that a goroutine
// started later is a session's.
func servedIdle(t *testing.T, p any) string {
	t.Helper()
	addr, _ := servedAt(t, Config{Provider: p, StreamIdleTimeout: testStreamIdle})
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	return addr
}

// clientConfig is how the tests' client reaches the kubelet port at addr:
// with the token fixedAuth admits.
func clientConfig(addr string) *rest.Config {
	return &rest.Config{Host: "https://" + addr, BearerToken: "good", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// streamSession is an exec or attach session opened with client-go's SPDY
// executor, as kubectl and the API server open them.
type streamSession struct {
	stdin *io.PipeWriter
	// closed receives when the session ended on the client's side.
	closed chan time.Time
}

// openStreamSession starts a session at path with a stdin the test writes to
// and a stdout nothing is written to. The client sends a SPDY ping every
// pingEvery; zero takes client-go's executor as it is (a ping every 5 s,
// which a test of a few seconds does not see).
func openStreamSession(t *testing.T, addr, path string, pingEvery time.Duration) *streamSession {
	t.Helper()
	u, err := url.Parse("https://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	var exec remotecommand.Executor
	if pingEvery == 0 {
		exec, err = remotecommand.NewSPDYExecutor(clientConfig(addr), http.MethodPost, u)
	} else {
		upgrader, rtErr := httpstreamspdy.NewRoundTripperWithConfig(httpstreamspdy.RoundTripperConfig{
			TLS: &tls.Config{InsecureSkipVerify: true}, PingPeriod: pingEvery})
		if rtErr != nil {
			t.Fatal(rtErr)
		}
		var rt http.RoundTripper
		if rt, err = rest.HTTPWrappersForConfig(clientConfig(addr), upgrader); err == nil {
			exec, err = remotecommand.NewSPDYExecutorForTransports(rt, upgrader, http.MethodPost, u)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	stdin, stdinW := io.Pipe()
	s := &streamSession{stdin: stdinW, closed: make(chan time.Time, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: io.Discard})
		s.closed <- time.Now()
	}()
	// A test that fails leaves no session behind for the next.
	t.Cleanup(func() { cancel(); stdinW.Close(); <-ended })
	return s
}

var execAndAttach = []struct{ name, path string }{
	{"exec", "/exec/ns/pod/ctr?command=sh&input=1&output=1"},
	{"attach", "/attach/ns/pod/ctr?input=1&output=1"},
}

// An exec or attach session through which nothing passes is closed after the
// idle timeout, and the provider's side ends with it: its stdin closes and its
// context ends (a command that reads no stdin has only the latter).
func TestStreamIdleTimeoutClosesExecAndAttach(t *testing.T) {
	for _, route := range execAndAttach {
		for _, readsInput := range []bool{true, false} {
			name := route.name + "/provider waits for its context"
			if readsInput {
				name = route.name + "/provider reads stdin"
			}
			t.Run(name, func(t *testing.T) {
				c := newSilentContainer(readsInput)
				addr := servedIdle(t, c)
				before := leakcheck.Take()
				opened := time.Now()
				s := openStreamSession(t, addr, route.path, 0)
				started := eventually.Receive(t, c.started, closeBound, "the provider's session started")
				closed := eventually.Receive(t, s.closed, testStreamIdle+closeBound, "an idle session closed")
				if idle := closed.Sub(opened); idle < testStreamIdle {
					t.Errorf("the session closed %s after it was opened, before the idle timeout (%s)", idle, testStreamIdle)
				}
				end := eventually.Receive(t, c.ended, closeBound, "the provider's session ended after the client's")
				t.Logf("closed %.2f s after the provider's session started; the provider's side ended at %.2f s: %s",
					closed.Sub(started).Seconds(), end.at.Sub(started).Seconds(), end.why)
				s.stdin.Close()
				checkNoSessionGoroutines(t, before)
			})
		}
	}
}

// Bytes written to an exec session's stdin more often than the idle timeout
// keep it open; once they stop, it is closed one idle timeout after the last.
func TestStreamIdleTimeoutWaitsForTheLastStdinByte(t *testing.T) {
	c := newSilentContainer(true)
	addr := servedIdle(t, c)
	s := openStreamSession(t, addr, execAndAttach[0].path, 0)
	eventually.Receive(t, c.started, closeBound, "the provider's session started")

	// A byte every keepAliveEvery for three times the idle timeout.
	var lastWrite time.Time
	tick := time.NewTicker(keepAliveEvery)
	defer tick.Stop()
	for until := time.Now().Add(3 * testStreamIdle); time.Now().Before(until); {
		<-tick.C
		if _, err := s.stdin.Write([]byte("x")); err != nil {
			t.Fatalf("writing to the session's stdin: %v", err)
		}
		lastWrite = time.Now()
		select {
		case at := <-s.closed:
			t.Fatalf("a session written to every %s closed %s after its last write (idle timeout %s)", keepAliveEvery, at.Sub(lastWrite), testStreamIdle)
		case end := <-c.ended:
			t.Fatalf("the provider's side of a session written to every %s ended: %s", keepAliveEvery, end.why)
		default:
		}
	}
	if c.received.Load() == 0 {
		t.Fatal("the provider received none of the bytes written")
	}

	// Then silence: closed one idle timeout after the last byte.
	closed := eventually.Receive(t, s.closed, testStreamIdle+closeBound, "a session closed once writes stopped")
	if idle := closed.Sub(lastWrite); idle < testStreamIdle {
		t.Errorf("the session closed %s after its last byte, before the idle timeout (%s)", idle, testStreamIdle)
	}
	eventually.Receive(t, c.ended, closeBound, "the provider's session ended after the client's")
	t.Logf("open after %s of writes every %s; closed %.2f s after the last byte", 3*testStreamIdle, keepAliveEvery, closed.Sub(lastWrite).Seconds())
}

// A SPDY ping is traffic too: the streaming library resets its idle timer on
// every frame it reads. So a client that pings more often than the timeout
// (client-go's SPDY clients ping every 5 s) is never closed for idleness, as
// with the kubelet (kubernetes/kubernetes#102569). This test pins that
// limitation down; the documentation states it.
func TestStreamIdleTimeoutCountsSPDYPingsAsTraffic(t *testing.T) {
	c := newSilentContainer(true)
	addr := servedIdle(t, c)
	s := openStreamSession(t, addr, execAndAttach[0].path, keepAliveEvery)
	eventually.Receive(t, c.started, closeBound, "the provider's session started")
	select {
	case <-s.closed:
		t.Fatalf("a session whose client pings every %s closed within %s (idle timeout %s)", keepAliveEvery, 3*testStreamIdle, testStreamIdle)
	case end := <-c.ended:
		t.Fatalf("the provider's side of a session whose client pings ended: %s", end.why)
	case <-time.After(3 * testStreamIdle):
	}
	if n := c.received.Load(); n != 0 {
		t.Fatalf("the provider received %d bytes; the client wrote none", n)
	}
}

// A port-forward connection through which nothing passes is closed after the
// idle timeout: one with no forwarded connection yet, as kubectl port-forward
// keeps before its first local connection, and one with a forwarded
// connection that carries no data, whose provider PortForward ends with it.
func TestStreamIdleTimeoutClosesPortForward(t *testing.T) {
	for _, tc := range []struct {
		name string
		// forward opens a forwarded port's streams, as kubectl port-forward
		// does for each local connection.
		forward bool
	}{{"no forwarded connection", false}, {"a forwarded connection without data", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSilentContainer(true)
			addr := servedIdle(t, c)
			before := leakcheck.Take()
			rt, upgrader, err := spdy.RoundTripperFor(clientConfig(addr))
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse("https://" + addr + "/portForward/ns/pod")
			dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
			opened := time.Now()
			conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			started, since := time.Now(), "the connection opened"
			if tc.forward {
				h := http.Header{}
				h.Set(corev1.PortHeader, "8080")
				h.Set(corev1.PortForwardRequestIDHeader, "0")
				for _, typ := range []string{corev1.StreamTypeError, corev1.StreamTypeData} {
					h.Set(corev1.StreamType, typ)
					if _, err := conn.CreateStream(h); err != nil {
						t.Fatalf("creating the %s stream: %v", typ, err)
					}
				}
				started = eventually.Receive(t, c.started, closeBound, "the provider's port-forward started")
				since = "the provider's port-forward started"
			}
			select {
			case <-conn.CloseChan():
			case <-time.After(testStreamIdle + closeBound):
				t.Fatalf("an idle port-forward connection still open %s after it opened", testStreamIdle+closeBound)
			}
			closed := time.Now()
			if idle := closed.Sub(opened); idle < testStreamIdle {
				t.Errorf("the connection closed %s after it was opened, before the idle timeout (%s)", idle, testStreamIdle)
			}
			why := "no provider session"
			if tc.forward {
				why = eventually.Receive(t, c.ended, closeBound, "the provider's port-forward ended after the connection").why
			}
			t.Logf("closed %.2f s after %s; %s", closed.Sub(started).Seconds(), since, why)
			conn.Close()
			checkNoSessionGoroutines(t, before)
		})
	}
}

// sessionCode are the code locations a stream session runs on either side:
// vkubelet's, the streaming libraries' and client-go's executor and dialer.
// (leakcheck counts vkubelet's alone.)
var sessionCode = []string{
	"github.com/vkubelet/vkubelet/",
	"k8s.io/cri-streaming/",
	"k8s.io/streaming/",
	"k8s.io/apimachinery/pkg/util/httpstream",
	"github.com/moby/spdystream",
	"k8s.io/client-go/tools/remotecommand",
	"k8s.io/client-go/tools/portforward",
}

// checkNoSessionGoroutines fails t if, within closeBound, goroutines started
// since before and running a session's code (sessionCode) are still there.
func checkNoSessionGoroutines(t *testing.T, before *leakcheck.Snapshot) {
	t.Helper()
	before.CheckGoroutinesOf(t, closeBound, sessionCode...)
}
