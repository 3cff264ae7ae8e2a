package upstream_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/interlinkplugin"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/upstreammock"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// interLinkNode is a vkubelet of its own (package sdk) with interLink's virtual
// kubelet behind the adapter compiled in (upstreammock.InterLink), built without
// the race detector: interLink's provider has data races of its own.
var interLinkNode = &scratchProgram{program: upstreammock.InterLink}

// interLink's virtual kubelet (github.com/interlink-hq/interlink's
// pkg/virtualkubelet), a third party's provider written for upstream
// virtual-kubelet, its source unchanged, compiled into a vkubelet of its own
// (package sdk) through upstream.WrapController, runs a node end to end:
// vkubelet's node → interLink's provider → interLink's API server (cmd/interlink
// of the same module version) → an interLink plugin (vkubelet's mock behind
// interLink's plugin API), all on 127.0.0.1. The node registers as interLink
// configures it and becomes Ready once interLink's provider has pinged its API
// server (the InterlinkConnectivity condition); a pod that takes its environment
// from a ConfigMap reaches the plugin with that environment resolved and
// reaches Running from the plugin's status; its logs come from the plugin
// through the API server's pods/log, vkubelet's kubelet API, the provider's
// logs route and interLink's API server, and the stats summary from the
// provider's stats route; a deleted pod goes, deleted in the plugin.
//
// vkubelet's node runs under its own identity (system:node:<name>, by TLS
// bootstrap). interLink's provider reads the API with a client of its own, from
// $KUBECONFIG, and needs more than a node may: listing every namespace and
// every pod (at start and in its status loop), which the Node authorizer
// refuses. It is given the admin kubeconfig: interLink's own main runs it with
// $KUBECONFIG's credential or, in a cluster, its pod's service account, never
// the node's.
func TestInterLinksVirtualKubeletRunsANodeThroughItsAPIServer(t *testing.T) {
	const node = "interlink-vk"
	bin := interLinkNode.build(t)
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	dir := t.TempDir()

	m, err := mock.New(mock.Config{}, node)
	if err != nil {
		t.Fatal(err)
	}
	plugin := interlinkplugin.New(m, "")
	pluginSrv := httptest.NewServer(plugin) // on 127.0.0.1
	t.Cleanup(pluginSrv.Close)
	apiPort := runInterLinkAPI(t, dir, pluginSrv.URL)

	vkConfig := filepath.Join(dir, "VirtualKubeletConfig.yaml")
	writeFile(t, vkConfig, fmt.Sprintf(`InterlinkURL: "http://127.0.0.1"
InterlinkPort: "%d"
Resources:
  CPU: "10"
  Memory: "64Gi"
  Pods: "37"
`, apiPort))

	bootstrap := testenv.NodeBootstrap(t, node)
	run := exec.Command(bin, "--provider", "interlink-vk", "--provider-config", vkConfig,
		"--nodename", node, "--address", "127.0.0.1",
		"--bootstrap-kubeconfig", bootstrap, "--kubeconfig", filepath.Join(dir, "node.kubeconfig"),
		"--cert-dir", filepath.Join(dir, "certs"), "--kubelet-port", "0",
		// A node may not read the cluster's client CA (kube-system's
		// extension-apiserver-authentication); a kubelet is given it so.
		"--client-ca-file", cp.PKI.CACert)
	run.Env = append(os.Environ(), "KUBECONFIG="+cp.KubeconfigPath)
	runNode(t, "the node with interLink's virtual kubelet", run, node)

	// The node registers as interLink configures it: its capacity from the
	// configuration file, its label and taint.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods := n.Status.Capacity[corev1.ResourcePods]
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "virtual-node.interlink/no-schedule" })
		return pods.Value() == 37 && n.Labels["virtual-node.interlink/type"] == "virtual-kubelet" && tainted,
			fmt.Sprintf("capacity %s pods, labels %v, taints %v: want interLink's 37 pods, label and taint", pods.String(), n.Labels, n.Spec.Taints)
	})

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"GREETING": "hi"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			// Longer than the wait for its deletion below: the pod must go
			// when interLink reports it stopped (its notification answers for
			// its GetPodStatus), not when the grace period runs out.
			TerminationGracePeriodSeconds: ptr.To[int64](300),
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Args: []string{"hello from the plugin"},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "job", corev1.PodRunning)
	submitted, creates, _ := plugin.Submitted(pod.UID)
	if creates != 1 {
		t.Errorf("the plugin was asked to create the pod %d times, want once", creates)
	}
	if cs := submitted.Pod.Spec.Containers; len(cs) != 1 || !slices.Contains(cs[0].Env, corev1.EnvVar{Name: "GREETING", Value: "hi"}) {
		t.Errorf("the plugin got the containers %+v, want main with GREETING=hi from the ConfigMap", cs)
	}

	// kubectl logs: the plugin's log line, the way back through every hop.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		b, err := c.CoreV1().Pods(ns).GetLogs("job", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		return err == nil && string(b) == "hello from the plugin\n", fmt.Sprintf("logs %q, %v", b, err)
	})

	// The stats summary, from the node's kubelet API as the API server asks
	// it (its node proxy refuses loopback addresses): interLink's figures for
	// its pod, from the provider's stats route.
	summary, err := kubeletGet(t, cp, node, "/stats/summary")
	if err != nil || !strings.Contains(summary, `"nodeName":"`+node+`"`) || !strings.Contains(summary, `"name":"job"`) {
		t.Errorf("stats summary %s, %v: want interLink's, with the pod", summary, err)
	}

	// interLink's provider pings its API server 30 s after it starts, then
	// reports the node Ready with its connectivity.
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ready, connected corev1.ConditionStatus
		for _, cond := range n.Status.Conditions {
			switch cond.Type {
			case corev1.NodeReady:
				ready = cond.Status
			case "InterlinkConnectivity":
				connected = cond.Status
			}
		}
		return ready == corev1.ConditionTrue && connected == corev1.ConditionTrue,
			fmt.Sprintf("Ready=%q InterlinkConnectivity=%q", ready, connected)
	})

	if err := c.CoreV1().Pods(ns).Delete(ctx, "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "job", metav1.GetOptions{})
		_, _, deletes := plugin.Submitted(pod.UID)
		return apierrors.IsNotFound(err) && deletes == 1, fmt.Sprintf("the pod in the API: %v; deletes in the plugin: %d", err, deletes)
	})
}

// runInterLinkAPI runs interLink's API server (built once into the cache) on a
// free port of 127.0.0.1, in front of the plugin at pluginURL, until the test
// ends, and returns its port once it answers.
func runInterLinkAPI(t *testing.T, dir, pluginURL string) int {
	t.Helper()
	bin, err := controlplane.EnsureInterLinkAPI(context.Background(), testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(pluginURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	config := filepath.Join(dir, "InterLinkConfig.yaml")
	writeFile(t, config, fmt.Sprintf(`InterlinkAddress: "http://127.0.0.1"
InterlinkPort: "%d"
SidecarURL: "http://127.0.0.1"
SidecarPort: "%d"
VerboseLogging: false
ErrorsOnlyLogging: false
DataRootFolder: %q
`, port, plugin.Port, filepath.Join(dir, "interlink-data")+"/"))
	stderr := &syncBuffer{}
	cmd := exec.Command(bin)
	// Its -interlinkconfigpath flag is refused: its main parses the command
	// line before the flag is defined.
	cmd.Env = append(os.Environ(), "INTERLINKCONFIGPATH="+config)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("interLink's API server:\n%s", stderr.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("interLink's API server exited:\n%s", stderr.String())
		default:
		}
		resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/pinglink", "application/json", nil)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "interLink's API server answers " + resp.Status
	})
	return port
}

// kubeletGet reads path from node's kubelet API on 127.0.0.1 with the
// credential the API server presents to kubelets.
func kubeletGet(t *testing.T, cp *controlplane.ControlPlane, node, path string) (string, error) {
	t.Helper()
	n, err := testenv.Client(t).CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	cert, err := tls.LoadX509KeyPair(cp.PKI.KubeletClientCert, cp.PKI.KubeletClientKey)
	if err != nil {
		return "", err
	}
	ca, err := os.ReadFile(cp.PKI.CACert)
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", n.Status.DaemonEndpoints.KubeletEndpoint.Port, path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return string(b), err
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testWriter logs what a cached build reports.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
