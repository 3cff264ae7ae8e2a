package e2econformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/clusternet"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
	"github.com/vkubelet/vkubelet/providers/kube"
)

// This file sets up the kube column: a vkubelet node with the kube provider,
// KubeNode, joined to the run's cluster (the source), offloading its pods to a
// second cluster (the target) of its own control plane, whose one node is a
// real kubelet, TargetNode. The target's kubelet runs on the run's containerd in
// the run's network namespace, as the reference kubelet does: the offloaded
// pods get addresses on the source's pod network, the source's kube-proxy
// serves their Services and its CoreDNS their names, as if the two clusters'
// networks were joined (docs/CONFORMANCE.md says how this differs from a real
// multi-cluster set-up).

const (
	// KubeNode is the kube provider's node in the run's cluster.
	KubeNode = "vkubelet-kube"
	// TargetNode is the target cluster's node, a real kubelet.
	TargetNode = "target-kubelet"

	// Ports in the run's network namespace, away from the virtual node's
	// (10250) and the reference kubelet's (10260, 10268).
	targetKubeletPort        = 10270
	targetKubeletHealthzPort = 10278
	kubeNodePort             = 10280

	// The bootstrap tokens' groups: each node's requests are decided by an
	// approver of its own.
	targetBootstrapGroup   = "system:bootstrappers:vkubelet-conformance-target"
	kubeNodeBootstrapGroup = "system:bootstrappers:vkubelet-conformance-kube"
)

// Kube is the kube column's node and its target cluster, running.
type Kube struct {
	// Target is the target cluster's control plane.
	Target *controlplane.ControlPlane
	// Kubelet is the target's node.
	Kubelet *Kubelet
	// Log is the kube provider's node's log.
	Log string

	forwarder   *netns.Forwarder
	node        *spawn.Process
	approverLog *os.File
}

// KubeSetup says what StartKube starts, with what.
type KubeSetup struct {
	// Vkubelet and Kubelet are the vkubelet and kubelet programs.
	Vkubelet, Kubelet string
	// Dir holds the target cluster's state and the nodes' logs.
	Dir string
	// LogLevel is the kube provider's node's log level.
	LogLevel string
	// Out receives the target control plane's progress.
	Out io.Writer
}

// StartKube starts the target cluster (a control plane, and a kubelet on c's
// containerd joined to it) and the kube provider's node in c, offloading to
// the target, and waits until both nodes are Ready.
func StartKube(ctx context.Context, c *Cluster, s KubeSetup, timeout time.Duration) (_ *Kube, err error) {
	pid, err := c.containerdPID()
	if err != nil {
		return nil, err
	}
	link, err := namespaceOf(pid)
	if err != nil {
		return nil, err
	}
	nodeIP, err := c.nodeIP(ctx)
	if err != nil {
		return nil, err
	}
	k := &Kube{Log: filepath.Join(s.Dir, "vkubelet.log")}
	defer func() {
		if err != nil {
			k.Stop()
		}
	}()
	if k.Target, err = controlplane.Start(ctx, controlplane.Config{
		Dir: filepath.Join(s.Dir, "target", "cluster"), Scheduler: true, ControllerManager: true, Out: s.Out,
	}); err != nil {
		return nil, fmt.Errorf("the target control plane: %w", err)
	}
	// The target's API server listens on the host's loopback; the kubelet and
	// the kube provider's node, in the namespace, reach it at the same address.
	api := net.JoinHostPort("127.0.0.1", strconv.Itoa(k.Target.APIPort()))
	if k.forwarder, err = link.Forward(api, api); err != nil {
		return nil, err
	}
	if k.Kubelet, err = startKubelet(ctx, kubeletJoin{
		Node: TargetNode, Binary: s.Kubelet, Dir: filepath.Join(s.Dir, "target", "kubelet"), Kubeconfig: k.Target.KubeconfigPath,
		ContainerdSocket: c.ContainerdSocket, Netns: link.Path(), NodeIP: nodeIP,
		Port: targetKubeletPort, HealthzPort: targetKubeletHealthzPort,
		TokenID: "target", Group: targetBootstrapGroup,
		// The source's DNS: the offloaded pods look up the source's Services.
		ClusterDNS: clusternet.DNSServiceIP,
	}, timeout); err != nil {
		return nil, fmt.Errorf("the target's kubelet: %w", err)
	}

	providerConfig := filepath.Join(s.Dir, "kube-provider.json")
	b, err := json.Marshal(kube.Config{
		Kubeconfig: k.Target.KubeconfigPath, ClusterID: "source",
		// One source cluster: the target's namespaces are the source's, so the
		// pods' DNS search paths name the source's namespaces.
		NamespaceStrategy: kube.NamespaceSame,
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(providerConfig, b, 0o644); err != nil {
		return nil, err
	}
	client, cluster, err := clusterOf(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	bootstrap, approverLog, err := joinAs(ctx, client, cluster, s.Dir, KubeNode, "vkkube", kubeNodeBootstrapGroup, nodeIP)
	if err != nil {
		return nil, err
	}
	k.approverLog = approverLog
	cmd := exec.Command("nsenter", "--net="+link.Path(), "--", s.Vkubelet, "run",
		"--provider=kube", "--provider-config="+providerConfig,
		"--nodename="+KubeNode,
		"--bootstrap-kubeconfig="+bootstrap,
		"--kubeconfig="+filepath.Join(s.Dir, "node.kubeconfig"),
		"--cert-dir="+filepath.Join(s.Dir, "pki"),
		"--client-ca-file="+cluster.CertificateAuthority,
		"--address="+nodeIP,
		"--kubelet-port="+strconv.Itoa(kubeNodePort),
		// The node under test takes the suite's pods, which tolerate no
		// provider taint (up's CRI node has none either).
		"--disable-taint",
		"--log-level="+s.LogLevel)
	if k.node, err = spawn.StartLogged("vkubelet "+KubeNode, k.Log, cmd); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, client, KubeNode, k.node, timeout); err != nil {
		return nil, err
	}
	return k, nil
}

// Running reports whether the kube provider's node and the target's kubelet
// still run.
func (k *Kube) Running() bool { return k.node.Running() && k.Kubelet.proc.Running() }

// Stop stops the kube provider's node, the target's kubelet and control plane.
// The offloaded pods stay with containerd, which up stops; RemoveCgroups then
// removes the kubelet's cgroups.
func (k *Kube) Stop() {
	k.node.Stop(30 * time.Second)
	if k.Kubelet != nil {
		k.Kubelet.Stop()
	}
	if k.forwarder != nil {
		_ = k.forwarder.Close()
	}
	if k.Target != nil {
		_ = k.Target.Stop()
	}
	if k.approverLog != nil {
		_ = k.approverLog.Close()
	}
}

// RemoveCgroups removes the target kubelet's cgroups, once its pods have stopped.
func (k *Kube) RemoveCgroups() {
	if k.Kubelet != nil {
		k.Kubelet.RemoveCgroups()
	}
}

// namespaceOf is the named network namespace (ip netns) process pid runs in.
func namespaceOf(pid int) (*netns.Link, error) {
	out, err := exec.Command("ip", "netns", "identify", strconv.Itoa(pid)).Output()
	name := strings.TrimSpace(string(out))
	if err != nil || name == "" || strings.ContainsAny(name, "/ \n") {
		return nil, fmt.Errorf("the network namespace of process %d (containerd) has no name (ip netns identify: %v)", pid, err)
	}
	return &netns.Link{Name: name}, nil
}
