package e2econformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/lab/clusternet"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// This file joins a real kubelet, the reference the virtual node is compared
// with, to the run's cluster (and, for the kube column, another to the target
// cluster, kube.go): built from the same Kubernetes module, on the same
// containerd and in the same network namespace as the virtual node (so that the
// same kube-proxy and CoreDNS serve its pods), under its own node identity from
// a TLS bootstrap with a bootstrap token of its own, its CSRs approved by an
// approver of its own (up's approver denies its token's requests for any name
// but its nodes'; a token of another group it leaves alone).

// ReferenceNode is the real kubelet's node name.
const ReferenceNode = "kubelet"

// kubeletBootstrapGroup is the extra group of the reference kubelet's bootstrap
// token, which may create CSRs (system:node-bootstrapper) and whose requests
// only this run's approver decides.
const kubeletBootstrapGroup = "system:bootstrappers:vkubelet-conformance"

// Ports of the kubelet in the virtual node's namespace, away from the virtual
// node's kubelet API (10250).
const (
	kubeletPort        = 10260
	kubeletHealthzPort = 10268
)

// Kubelet is a running kubelet: the reference, or the kube column's target node.
type Kubelet struct {
	Node string
	Log  string
	root string // --root-dir
	proc *spawn.Process
	// cgroups is its cgroup root, removed by RemoveCgroups.
	cgroups *cgroupRoot
	// approverLog is the log of its CSR approver, which runs until the run's
	// context ends.
	approverLog *os.File
}

// kubeletJoin is a kubelet to start on the run's containerd, in its network
// namespace, and the cluster it joins.
type kubeletJoin struct {
	// Node is the kubelet's node name.
	Node string
	// Binary is the kubelet program; Dir holds its state and logs.
	Binary, Dir string
	// Kubeconfig is the admin kubeconfig of the cluster it joins (its
	// bootstrap token and approver are made with it).
	Kubeconfig string
	// ContainerdSocket, Netns and NodeIP are the run's containerd, the path of
	// its network namespace and the address there.
	ContainerdSocket, Netns, NodeIP string
	// Port and HealthzPort are the kubelet's in the namespace.
	Port, HealthzPort int
	// TokenID (6 characters of [a-z0-9]) and Group are its bootstrap token's
	// id and extra group: a group of its own, whose requests only its own
	// approver decides.
	TokenID, Group string
	// ClusterDNS is the DNS Service address its pods are given.
	ClusterDNS string
}

// StartKubelet starts binary as the kubelet of node ReferenceNode in c, its
// state in dir, and waits until its Node is Ready.
func StartKubelet(ctx context.Context, c *Cluster, binary, dir string, timeout time.Duration) (*Kubelet, error) {
	netnsPath, err := c.containerdNetns()
	if err != nil {
		return nil, err
	}
	nodeIP, err := c.nodeIP(ctx)
	if err != nil {
		return nil, err
	}
	return startKubelet(ctx, kubeletJoin{
		Node: ReferenceNode, Binary: binary, Dir: dir, Kubeconfig: c.Kubeconfig,
		ContainerdSocket: c.ContainerdSocket, Netns: netnsPath, NodeIP: nodeIP,
		Port: kubeletPort, HealthzPort: kubeletHealthzPort,
		TokenID: "kubelt", Group: kubeletBootstrapGroup, ClusterDNS: clusternet.DNSServiceIP,
	}, timeout)
}

// nodeIP is the virtual node's InternalIP: the address of the network
// namespace, which every node of the run shares.
func (c *Cluster) nodeIP(ctx context.Context) (string, error) {
	client, err := adminClient(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	return internalIP(ctx, client, c.Node)
}

// adminClient is a client of the cluster of the admin kubeconfig at path.
func adminClient(kubeconfig string) (kubernetes.Interface, error) {
	rest, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rest)
}

// startKubelet starts the kubelet j describes and waits until its Node is Ready.
func startKubelet(ctx context.Context, j kubeletJoin, timeout time.Duration) (*Kubelet, error) {
	if err := os.MkdirAll(j.Dir, 0o755); err != nil {
		return nil, err
	}
	client, cluster, err := clusterOf(j.Kubeconfig)
	if err != nil {
		return nil, err
	}
	bootstrap, approverLog, err := joinAs(ctx, client, cluster, j.Dir, j.Node, j.TokenID, j.Group, j.NodeIP)
	if err != nil {
		return nil, err
	}
	// A cgroup root of its own: a kubelet kills the processes of the pod
	// cgroups under its root that it does not know, so two kubelets on one
	// machine (another run's, say) must not share one.
	cg, err := makeCgroupRoot("vkubelet-conformance-" + strings.ToLower(rand.Text()[:8]))
	if err != nil {
		_ = approverLog.Close()
		return nil, err
	}
	config := filepath.Join(j.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(kubeletConfig(j, cluster.CertificateAuthority, cg.name)), 0o644); err != nil {
		_ = approverLog.Close()
		return nil, err
	}
	k := &Kubelet{Node: j.Node, Log: filepath.Join(j.Dir, "kubelet.log"), root: filepath.Join(j.Dir, "root"), approverLog: approverLog, cgroups: cg}
	cmd := exec.Command("nsenter", "--net="+j.Netns, "--", j.Binary,
		"--config="+config,
		"--bootstrap-kubeconfig="+bootstrap,
		"--kubeconfig="+filepath.Join(j.Dir, "kubelet.kubeconfig"),
		"--cert-dir="+filepath.Join(j.Dir, "pki"),
		"--root-dir="+k.root,
		"--hostname-override="+j.Node,
		"--node-ip="+j.NodeIP,
		"--v=2")
	if k.proc, err = spawn.StartLogged("kubelet "+j.Node, k.Log, cmd); err != nil {
		_ = approverLog.Close()
		return nil, err
	}
	if err := waitReady(ctx, client, j.Node, k.proc, timeout); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

// clusterOf is a client of the cluster of an admin kubeconfig, and its entry
// there (server and CA).
func clusterOf(kubeconfig string) (kubernetes.Interface, *clientcmdapi.Cluster, error) {
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := adminClient(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	return client, admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster], nil
}

// joinAs prepares a node's TLS bootstrap into the cluster of client: a
// bootstrap token (id tokenID, extra group group) in a kubeconfig written to
// dir, and an approver of the client and serving CSRs of that one node name
// and address, asked for by that group, which runs until ctx ends and logs to
// the returned file. It returns the bootstrap kubeconfig's path.
func joinAs(ctx context.Context, client kubernetes.Interface, cluster *clientcmdapi.Cluster, dir, node, tokenID, group, nodeIP string) (string, *os.File, error) {
	bootstrap := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := writeBootstrapKubeconfig(ctx, client, cluster, bootstrap, tokenID, group); err != nil {
		return "", nil, err
	}
	ips, err := identity.ParseCIDRs(nodeIP)
	if err != nil {
		return "", nil, err
	}
	approverLog, err := os.Create(filepath.Join(dir, "approver.log"))
	if err != nil {
		return "", nil, err
	}
	approver, err := identity.NewApprover(identity.ApproverConfig{Client: client, Logger: slog.New(slog.NewTextHandler(approverLog, nil)), Policy: identity.Policy{
		Names: []string{node}, RequesterGroups: []string{group}, ServingIPs: ips,
	}})
	if err != nil {
		_ = approverLog.Close()
		return "", nil, err
	}
	go func() { _ = approver.Run(ctx, 1) }()
	return bootstrap, approverLog, nil
}

// waitReady waits until node is Ready, while proc, which runs it, runs.
func waitReady(ctx context.Context, client kubernetes.Interface, node string, proc *spawn.Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			return nil
		}
		if !proc.Running() {
			return fmt.Errorf("%s exited (%v):\n%s", proc.Name, proc.Err(), proc.Tail(40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready after %s (log %s):\n%s", node, timeout, proc.Log, proc.Tail(40))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Stop stops the kubelet and removes its root directory, which it leaves
// mounted: it bind-mounts the directory onto itself, and its pods' volumes
// below. Its pods stay with containerd, which up stops; its cgroup root stays
// until RemoveCgroups, once they have stopped.
func (k *Kubelet) Stop() {
	k.proc.Stop(30 * time.Second)
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		lines := strings.Split(string(mounts), "\n")
		for i := len(lines) - 1; i >= 0; i-- { // the last mounted first
			if f := strings.Fields(lines[i]); len(f) > 1 && (f[1] == k.root || strings.HasPrefix(f[1], k.root+"/")) {
				_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
			}
		}
	}
	_ = os.RemoveAll(k.root)
	_ = k.approverLog.Close()
}

// RemoveCgroups removes the kubelet's cgroup root, once its pods have stopped
// (up stops containerd, which stops them).
func (k *Kubelet) RemoveCgroups() { k.cgroups.remove() }

// kubeletConfig is the configuration of the kubelet j: authenticated and
// authorized as a cluster's kubelet is (client certificates of the cluster CA,
// webhook token and SubjectAccessReview checks), a serving certificate from the
// cluster (serverTLSBootstrap), the cluster DNS of `vkubeletctl up`, pod
// cgroups under cgroupRoot and pod logs in its directory (a kubelet removes the
// pod log directories of the pods it does not know), and what this machine
// needs: cgroupfs (containerd's runc default), cgroup v1 allowed, swap allowed,
// eviction thresholds low enough for a small disk.
func kubeletConfig(j kubeletJoin, caFile, cgroupRoot string) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ` + j.NodeIP + `
port: ` + strconv.Itoa(j.Port) + `
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ` + strconv.Itoa(j.HealthzPort) + `
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ` + strconv.Quote(caFile) + `}
authorization: {mode: Webhook}
containerRuntimeEndpoint: ` + strconv.Quote("unix://"+j.ContainerdSocket) + `
cgroupDriver: cgroupfs
cgroupRoot: ` + strconv.Quote(cgroupRoot) + `
podLogsDir: ` + strconv.Quote(filepath.Join(j.Dir, "pod-logs")) + `
failCgroupV1: false
failSwapOn: false
rotateCertificates: true
serverTLSBootstrap: true
clusterDNS: [` + j.ClusterDNS + `]
clusterDomain: ` + clusternet.ClusterDomain + `
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`
}

// writeBootstrapKubeconfig makes a bootstrap token (id, extra group group),
// lets the group create CSRs, and writes a kubeconfig with the token to path.
func writeBootstrapKubeconfig(ctx context.Context, client kubernetes.Interface, cluster *clientcmdapi.Cluster, path, id, group string) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vkubelet-conformance:node-bootstrapper:" + id},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", crb.Name, err)
	}
	secret := randomSecret()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              group,
			"expiration":                     time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
			"description":                    "vkubelet conformance: a node's TLS bootstrap",
		},
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the bootstrap token %s: %w", id, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = cluster
	cfg.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	cfg.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "bootstrap"}
	cfg.CurrentContext = "bootstrap"
	return clientcmd.WriteToFile(*cfg, path)
}

// randomSecret is a bootstrap token's 16-character secret, of [a-z2-7].
func randomSecret() string { return strings.ToLower(rand.Text()[:16]) }

// internalIP is node's InternalIP.
func internalIP(ctx context.Context, client kubernetes.Interface, node string) (string, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address, nil
		}
	}
	return "", fmt.Errorf("node %s has no InternalIP", node)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// containerdNetns is the network namespace of up's containerd (the virtual
// node's).
func (c *Cluster) containerdNetns() (string, error) {
	pid, err := c.containerdPID()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid), nil
}

// containerdPID is the process of up's containerd: the one run with the
// configuration beside its socket.
func (c *Cluster) containerdPID() (int, error) {
	want := []byte(filepath.Join(filepath.Dir(c.ContainerdSocket), "containerd.toml"))
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if len(args) > 2 && filepath.Base(string(args[0])) == "containerd" && bytes.Equal(args[2], want) {
			return strconv.Atoi(filepath.Base(filepath.Dir(p)))
		}
	}
	return 0, fmt.Errorf("no containerd process runs with %s", strings.TrimSpace(string(want)))
}

// notUnderTest is the taint that keeps the virtual node out of the reference
// kubelet's run.
const notUnderTest = "conformance.vkubelet.io/not-under-test"

// taintOut taints node NoSchedule with notUnderTest.
func taintOut(ctx context.Context, c *Cluster, node string) error {
	client, err := adminClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: notUnderTest, Effect: corev1.TaintEffectNoSchedule})
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("tainting node %s: %w", node, err)
	}
	return nil
}

// deleteNode deletes node's Node from c.
func deleteNode(ctx context.Context, c *Cluster, node string) error {
	client, err := adminClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", node, err)
	}
	return nil
}
