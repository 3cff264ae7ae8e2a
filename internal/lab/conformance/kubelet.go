package conformance

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

	"github.com/vkubelet/vkubelet/csrapprover"
	"github.com/vkubelet/vkubelet/internal/lab/clusternet"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// This file joins a real kubelet, the reference the virtual node is compared
// with, to the run's cluster: built from the same Kubernetes module, on the same
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

// Kubelet is a running reference kubelet.
type Kubelet struct {
	Node string
	Log  string
	root string // --root-dir
	proc *spawn.Process
	// approverLog is the log of its CSR approver, which runs until the run's
	// context ends.
	approverLog *os.File
}

// StartKubelet starts binary as the kubelet of node ReferenceNode in c, its
// state in dir, and waits until its Node is Ready.
func StartKubelet(ctx context.Context, c *Cluster, binary, dir string, timeout time.Duration) (*Kubelet, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	rest, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, err
	}
	nodeIP, err := internalIP(ctx, client, c.Node)
	if err != nil {
		return nil, err
	}
	netnsPath, err := c.containerdNetns()
	if err != nil {
		return nil, err
	}
	bootstrap := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := writeBootstrapKubeconfig(ctx, client, cluster, bootstrap); err != nil {
		return nil, err
	}
	ips, err := csrapprover.ParseCIDRs(nodeIP)
	if err != nil {
		return nil, err
	}
	approverLog, err := os.Create(filepath.Join(dir, "approver.log"))
	if err != nil {
		return nil, err
	}
	approver, err := csrapprover.NewController(csrapprover.Config{Client: client, Logger: slog.New(slog.NewTextHandler(approverLog, nil)), Policy: csrapprover.Policy{
		Names: []string{ReferenceNode}, RequesterGroups: []string{kubeletBootstrapGroup}, ServingIPs: ips,
	}})
	if err != nil {
		return nil, err
	}
	go func() { _ = approver.Run(ctx, 1) }()

	config := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(kubeletConfig(cluster.CertificateAuthority, c.ContainerdSocket, nodeIP)), 0o644); err != nil {
		return nil, err
	}
	k := &Kubelet{Node: ReferenceNode, Log: filepath.Join(dir, "kubelet.log"), root: filepath.Join(dir, "root"), approverLog: approverLog}
	cmd := exec.Command("nsenter", "--net="+netnsPath, "--", binary,
		"--config="+config,
		"--bootstrap-kubeconfig="+bootstrap,
		"--kubeconfig="+filepath.Join(dir, "kubelet.kubeconfig"),
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--root-dir="+k.root,
		"--hostname-override="+ReferenceNode,
		"--node-ip="+nodeIP,
		"--v=2")
	if k.proc, err = spawn.StartLogged("kubelet", k.Log, cmd); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, ReferenceNode, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			return k, nil
		}
		if !k.proc.Running() {
			return nil, fmt.Errorf("the kubelet exited (%v):\n%s", k.proc.Err(), k.proc.Tail(40))
		}
		if time.Now().After(deadline) {
			k.Stop()
			return nil, fmt.Errorf("node %s not Ready after %s (log %s):\n%s", ReferenceNode, timeout, k.Log, k.proc.Tail(40))
		}
		select {
		case <-ctx.Done():
			k.Stop()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Stop stops the kubelet and removes its root directory, which it leaves
// mounted: it bind-mounts the directory onto itself, and its pods' volumes
// below. Its pods stay with containerd, which up stops.
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

// kubeletConfig is the reference kubelet's configuration: authenticated and
// authorized as a cluster's kubelet is (client certificates of the cluster CA,
// webhook token and SubjectAccessReview checks), a serving certificate from the
// cluster (serverTLSBootstrap), the cluster DNS of `vkubeletctl up`, and what
// this machine needs: cgroupfs (containerd's runc default), cgroup v1 allowed,
// swap allowed, eviction thresholds low enough for a small disk.
func kubeletConfig(caFile, containerdSocket, nodeIP string) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ` + nodeIP + `
port: ` + strconv.Itoa(kubeletPort) + `
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ` + strconv.Itoa(kubeletHealthzPort) + `
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ` + strconv.Quote(caFile) + `}
authorization: {mode: Webhook}
containerRuntimeEndpoint: ` + strconv.Quote("unix://"+containerdSocket) + `
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
rotateCertificates: true
serverTLSBootstrap: true
clusterDNS: [` + clusternet.DNSServiceIP + `]
clusterDomain: ` + clusternet.ClusterDomain + `
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`
}

// writeBootstrapKubeconfig makes a bootstrap token of kubeletBootstrapGroup,
// lets the group create CSRs, and writes a kubeconfig with the token to path.
func writeBootstrapKubeconfig(ctx context.Context, client kubernetes.Interface, cluster *clientcmdapi.Cluster, path string) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vkubelet-conformance:node-bootstrapper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: kubeletBootstrapGroup}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", crb.Name, err)
	}
	id, secret := "kubelt", randomSecret()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              kubeletBootstrapGroup,
			"expiration":                     time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
			"description":                    "vkubelet conformance: the reference kubelet's TLS bootstrap",
		},
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the kubelet's bootstrap token: %w", err)
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
// node's), found by its process: the one run with the configuration beside its
// socket.
func (c *Cluster) containerdNetns() (string, error) {
	want := []byte(filepath.Join(filepath.Dir(c.ContainerdSocket), "containerd.toml"))
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return "", err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if len(args) > 2 && filepath.Base(string(args[0])) == "containerd" && bytes.Equal(args[2], want) {
			return filepath.Join(filepath.Dir(p), "ns", "net"), nil
		}
	}
	return "", fmt.Errorf("no containerd process runs with %s", strings.TrimSpace(string(want)))
}

// notUnderTest is the taint that keeps the virtual node out of the reference
// kubelet's run.
const notUnderTest = "conformance.vkubelet.io/not-under-test"

// taintOut taints node NoSchedule with notUnderTest.
func taintOut(ctx context.Context, c *Cluster, node string) error {
	rest, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rest)
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
