package e2econformance

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// Cluster is a `vkubeletctl up --provider cri` running as a child process: a
// local control plane with kube-proxy and CoreDNS, and one vkubelet CRI node on
// a private containerd, the cluster's only node.
type Cluster struct {
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// Registry is the local image registry (host:port) that containerd pulls
	// from, over plain HTTP, inside the node's network namespace as on the host.
	Registry string
	// ContainerdSocket is the CRI socket of the node's containerd.
	ContainerdSocket string
	// Busybox is crienv's busybox image in Registry.
	Busybox string
	// Node is the virtual node's name.
	Node string
	// Log holds everything up printed: the control plane's progress and the node's log.
	Log string

	proc *spawn.Process
}

// What up prints once the cluster is ready: its kubeconfig on stdout, and where
// crienv serves busybox on stderr before that.
var (
	kubeconfigLine = regexp.MustCompile(`(?m)^export KUBECONFIG=(\S+)$`)
	registryLine   = regexp.MustCompile(`containerd at (\S+); image busybox served from (\S+)`)
)

// StartCluster runs vkubeletctl (the path of the vkubeletctl binary) up with the
// CRI provider, the cluster's state in dir/cluster and its output in dir/up.log,
// and waits until it is ready or timeout passes. The node is named node and
// logs at logLevel. Stop ends it.
func StartCluster(ctx context.Context, vkubeletctl, dir, node, logLevel string, timeout time.Duration) (*Cluster, error) {
	c := &Cluster{Log: filepath.Join(dir, "up.log"), Node: node}
	// Privileged containers allowed, as the reference kubelet allows them by
	// default: the tests that need one (hostPath volumes, PrivilegedPod) then
	// measure the node, not a setting.
	cmd := exec.Command(vkubeletctl, "up", "--provider", "cri", "--dir", filepath.Join(dir, "cluster"),
		"--nodename", node, "--log-level", logLevel, "--cri-allow-privileged")
	p, err := spawn.StartLogged("vkubeletctl up", c.Log, cmd)
	if err != nil {
		return nil, err
	}
	c.proc = p
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.scanLog() {
			c.Busybox = c.Registry + "/busybox:1"
			return c, nil
		}
		select {
		case <-p.Done():
			return nil, fmt.Errorf("vkubeletctl up exited before the cluster was ready (%v):\n%s", p.Err(), p.Tail(30))
		case <-deadline.C:
			c.Stop()
			return nil, fmt.Errorf("the cluster was not ready after %s:\n%s", timeout, p.Tail(30))
		case <-ctx.Done():
			c.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// scanLog reads up's log for the kubeconfig and the registry, and reports
// whether both were found.
func (c *Cluster) scanLog() bool {
	f, err := os.Open(c.Log)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		if m := registryLine.FindStringSubmatch(line); m != nil {
			c.ContainerdSocket, c.Registry = m[1], m[2]
		}
		if m := kubeconfigLine.FindStringSubmatch(line); m != nil {
			c.Kubeconfig = m[1]
		}
	}
	return c.Registry != "" && c.Kubeconfig != ""
}

// Running reports whether up is still running.
func (c *Cluster) Running() bool { return c.proc.Running() }

// Stop stops up, which stops the node, containerd and the control plane.
func (c *Cluster) Stop() {
	c.proc.Stop(2 * time.Minute)
}
