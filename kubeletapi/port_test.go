package kubeletapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/leakcheck"
)

// portNode is a node served on a shared port: its socket's address and the way
// to stop it.
type portNode struct {
	addr string
	stop func()
	done chan error
}

func serveOnPort(t *testing.T, p *Port, name string, pods ...string) portNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOnListener(t, p, l, name, pods...)
}

// serveOnListener is serveOnPort on l.
func serveOnListener(t *testing.T, p *Port, l net.Listener, name string, pods ...string) portNode {
	t.Helper()
	auth := &fixedAuth{}
	var lister podLister
	for _, pod := range pods {
		lister.pods = append(lister.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pod}})
	}
	s, err := NewServer(Config{NodeName: name, Provider: lister, Authenticator: auth,
		Authorizer: authorizer.AuthorizerFunc(auth.Authorize), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := identity.ServingCertificate(context.Background(), identity.ServingConfig{SelfSigned: true, NodeName: name, DNSNames: []string{name},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := portNode{addr: l.Addr().String(), stop: cancel, done: make(chan error, 1)}
	go func() { n.done <- p.Serve(ctx, s, l, cert) }()
	t.Cleanup(cancel)
	return n
}

// podsAt lists the pods of the node at addr through /pods, and the name its
// certificate was made for.
func podsAt(t *testing.T, client *http.Client, addr string) (pods []string, certName string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/pods", nil)
	req.Header.Set("Authorization", "Bearer good")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("/pods at %s: %d, %v", addr, resp.StatusCode, err)
	}
	for _, p := range list.Items {
		pods = append(pods, p.Name)
	}
	return pods, resp.TLS.PeerCertificates[0].Subject.CommonName
}

// Two nodes on one port, each on its own socket: a request is answered by the
// node whose socket it came to, node-level paths included, with that node's
// certificate. A node that stops closes its connections; the other goes on.
func TestAPortServesEachNodeOnItsOwnSocket(t *testing.T) {
	before := leakcheck.Take()
	p := NewPort(PortConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	portDone := make(chan error, 1)
	go func() { portDone <- p.Run(ctx) }()
	a := serveOnPort(t, p, "node-a", "web-1", "web-2")
	b := serveOnPort(t, p, "node-b", "db-1")

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		n    portNode
		name string
		want string
	}{{a, "node-a", "[web-1 web-2]"}, {b, "node-b", "[db-1]"}, {a, "node-a", "[web-1 web-2]"}} {
		pods, cn := podsAt(t, client, tc.n.addr)
		if got := fmt.Sprint(pods); got != tc.want || cn != tc.name {
			t.Errorf("/pods at %s's socket: %s with a certificate for %q; want %s from %q", tc.name, got, cn, tc.want, tc.name)
		}
	}

	// A connection to b kept open, then b stops.
	c, err := tls.Dial("tcp", b.addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b.stop()
	if err := <-b.done; err != nil {
		t.Errorf("stopped node's Serve: %v", err)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Error("a stopped node's connection stayed open")
	}
	if _, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
		t.Error("a stopped node's socket still accepts")
	}
	if pods, _ := podsAt(t, client, a.addr); fmt.Sprint(pods) != "[web-1 web-2]" {
		t.Errorf("node-a after node-b stopped: %v", pods)
	}

	client.CloseIdleConnections()
	cancel()
	if err := <-portDone; err != nil {
		t.Errorf("port: %v", err)
	}
	// A node whose port stopped stops too, and says why.
	select {
	case err := <-a.done:
		if err == nil {
			t.Error("node-a's Serve ended without an error when its port stopped")
		}
	case <-time.After(5 * time.Second):
		t.Error("node-a's Serve went on after its port stopped")
	}
	before.Check(t, 5*time.Second)
}

// failingListener fails its first failures Accepts as a process out of file
// descriptors does.
type failingListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// An Accept that fails for a while (out of file descriptors) is tried again
// after a back-off; the node goes on serving.
func TestAFailedAcceptIsTriedAgain(t *testing.T) {
	p := NewPort(PortConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &failingListener{Listener: inner}
	l.failures.Store(3)
	n := serveOnListener(t, p, l, "node-a", "web-1")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	if pods, _ := podsAt(t, client, n.addr); fmt.Sprint(pods) != "[web-1]" {
		t.Errorf("/pods after three failed Accepts: %v", pods)
	}
	if left := l.failures.Load(); left >= 0 {
		t.Errorf("%d failures left: Accept was not tried again", left+1)
	}
	n.stop()
	if err := <-n.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
