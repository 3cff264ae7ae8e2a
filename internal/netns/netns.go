// Package netns gives a virtual node a non-loopback address on this machine: a
// network namespace joined to the host by a veth pair, with a /30 between them.
//
// Why: kube-apiserver refuses to proxy nodes/<name>/proxy/... (stats/summary,
// metrics/resource, `kubectl get --raw`) to loopback addresses, so a node that
// advertises 127.0.0.1 serves logs and exec but not those. Inside the namespace the
// kubelet API listens on the namespace's end of the pair, which the API server on
// the host reaches over the veth; no traffic leaves the machine.
//
// It needs root (CAP_NET_ADMIN) and iproute2's `ip`. Used by `vkubelet up` and the
// integration tests; production nodes listen on their real address instead.
package netns

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

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
		return fmt.Errorf("network namespaces need iproute2's ip: %w", err)
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
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Switching namespaces changes only this OS thread. It goes back to the
		// host's namespace before it is unlocked; should that fail, it stays locked
		// and Go discards it, so no other goroutine ever runs in the namespace.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer host.Close()
		target, err := os.Open("/var/run/netns/" + l.Name)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering network namespace %s: %w", l.Name, err)}
			return
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(l.NodeIP, fmt.Sprint(port)))
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.l, r.err
}
