// Package netns gives a virtual node a non-loopback address on this machine: a
// network namespace joined to the host by a veth pair, with a /30 between them.
//
// Why: kube-apiserver refuses to proxy nodes/<name>/proxy/... (stats/summary,
// metrics/resource, `kubectl get --raw`) to loopback addresses, so a node that
// advertises 127.0.0.1 serves logs and exec but not those. Inside the namespace the
// kubelet API listens on the namespace's end of the pair, which the API server on
// the host reaches over the veth; no traffic leaves the machine.
//
// It needs root (CAP_NET_ADMIN) and iproute2's `ip`. Used by `vkubeletctl up` and the
// integration tests; production nodes listen on their real address instead.
package netns

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Link is a namespace and the addresses of both ends of its veth pair.
type Link struct {
	Name   string // network namespace name (ip netns)
	HostIP string // the host's end
	NodeIP string // the namespace's end: the node's InternalIP
}

// Available reports whether Create can work here, and why not.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("network namespaces need iproute2's ip (scripts/setup.sh installs it): %w", err)
	}
	return nil
}

// Create makes a namespace named prefix-<random> with a veth pair to the host, on a
// random /30 in 10.213.0.0/16. Remove undoes it.
func Create(prefix string) (*Link, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	n := binary.BigEndian.Uint16(b[:]) & 0x3fff // 16384 /30s in a /16
	id := fmt.Sprintf("%04x", n)
	l := &Link{
		Name:   prefix + "-" + id,
		HostIP: fmt.Sprintf("10.213.%d.%d", n>>6, (n&63)*4+1),
		NodeIP: fmt.Sprintf("10.213.%d.%d", n>>6, (n&63)*4+2),
	}
	host, peer := "vkh"+id, "vkn"+id
	steps := [][]string{
		{"netns", "add", l.Name},
		{"link", "add", host, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", l.Name},
		{"addr", "add", l.HostIP + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", l.Name, "addr", "add", l.NodeIP + "/30", "dev", peer},
		{"-n", l.Name, "link", "set", peer, "up"},
		{"-n", l.Name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			l.Remove()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return l, nil
}

// Remove deletes the namespace; the veth pair goes with it.
func (l *Link) Remove() {
	_ = exec.Command("ip", "netns", "del", l.Name).Run()
}

// Listen opens a TCP listener on the namespace's address. The socket belongs to the
// namespace for its whole life, while this process stays in the host's namespace.
func (l *Link) Listen(port int) (net.Listener, error) {
	return l.ListenAt(net.JoinHostPort(l.NodeIP, fmt.Sprint(port)))
}

// ListenAt opens a TCP listener on addr (host:port) inside the namespace.
func (l *Link) ListenAt(addr string) (ln net.Listener, err error) {
	err = l.Do(func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Dial opens a TCP connection from inside the namespace: to a server that
// listens only there (a kube-proxy's health port, a NodePort).
func (l *Link) Dial(addr string) (c net.Conn, err error) {
	err = l.Do(func() error {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	})
	return c, err
}

// Do runs f on an OS thread inside the namespace. Sockets f creates belong to the
// namespace for their whole life and may be used from any goroutine afterwards;
// f itself must not start goroutines that create sockets (they would run in the
// host's namespace).
func (l *Link) Do(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		// Switching namespaces changes only this OS thread. It goes back to the
		// host's namespace before it is unlocked; should that fail, it stays locked
		// and Go discards it, so no other goroutine ever runs in the namespace.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer host.Close()
		target, err := os.Open(l.Path())
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace %s: %w", l.Name, err)
			return
		}
		err = f()
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// Path is the namespace's file, for setns(2) and nsenter --net.
func (l *Link) Path() string { return "/var/run/netns/" + l.Name }

// Command is exec.Command run inside the namespace (by nsenter, which enters only
// the network namespace: the command shares this host's files and mounts).
func (l *Link) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + l.Path(), "--", name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (l *Link) Run(name string, args ...string) (string, error) {
	out, err := l.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s %s: %w: %s", l.Name, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// AddLocalAddress gives the namespace's loopback device ip/32, an address that is
// the same in every node's namespace (a cluster-wide endpoint such as the API
// server's or the cluster DNS's) and reaches a listener in this one.
func (l *Link) AddLocalAddress(ip string) error {
	if out, err := exec.Command("ip", "-n", l.Name, "addr", "replace", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s addr replace %s/32 dev lo: %v: %s", l.Name, ip, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Sysctl sets a sysctl (dotted name) inside the namespace: the net.* ones are
// per namespace.
func (l *Link) Sysctl(name, value string) error {
	file := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	_, err := l.Run("sh", "-c", `echo "$1" > "$2"`, "sh", value, file)
	return err
}

// Route sends traffic for cidr from the host into the namespace (to pods behind
// a bridge in it, say). Remove takes it away with the veth pair.
func (l *Link) Route(cidr string) error {
	if out, err := exec.Command("ip", "route", "replace", cidr, "via", l.NodeIP).CombinedOutput(); err != nil {
		return fmt.Errorf("ip route replace %s via %s: %v: %s", cidr, l.NodeIP, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Forwarder relays the connections of a listener in a namespace to an address
// of the host.
type Forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Forward listens on addr inside the namespace and relays every connection to
// target, dialled from the host's namespace: how processes in the namespace reach
// a server that listens only on the host's loopback (the API server, a local
// registry).
func (l *Link) Forward(addr, target string) (*Forwarder, error) {
	ln, err := l.ListenAt(addr)
	if err != nil {
		return nil, fmt.Errorf("forwarding %s in %s to %s: %w", addr, l.Name, target, err)
	}
	f := &Forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is the address the forwarder listens on, inside the namespace.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go f.relay(in)
	}
}

func (f *Forwarder) relay(in net.Conn) {
	defer f.wg.Done()
	out, err := net.DialTimeout("tcp", f.target, 10*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !f.track(in, out) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close, so that the other direction can finish its reply.
		if c, ok := dst.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	f.untrack(in, out)
}

func (f *Forwarder) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *Forwarder) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(f.conns, c)
	}
}

// Close stops listening, cuts the relayed connections and waits for them.
func (f *Forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}
