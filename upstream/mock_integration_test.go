package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/lab/upstreammock"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/remote/conformance"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// scratchProgram is a program with upstream's mock, built once per test binary
// (internal/lab/upstreammock).
type scratchProgram struct {
	program upstreammock.Program

	once sync.Once
	bin  string
	err  error
}

var (
	// upstreamMockServer serves upstream's mock behind the adapter over
	// vkubelet's provider protocol.
	upstreamMockServer = &scratchProgram{program: upstreammock.Server}
	// upstreamMockNode is a vkubelet of its own (package sdk) with upstream's
	// mock behind the adapter compiled in.
	upstreamMockNode = &scratchProgram{program: upstreammock.Node}
)

// build builds the program once, with the race detector if the test binary
// has it (the adapter's calls into the mock are checked for races too), and
// returns its binary; it skips the test under -short, as the programs are only
// run against the control plane.
func (p *scratchProgram) build(t *testing.T) string {
	t.Helper()
	testenv.ControlPlane(t) // skips under -short
	p.once.Do(func() {
		repo, err := filepath.Abs("..")
		if err != nil {
			p.err = err
			return
		}
		p.bin, p.err = upstreammock.Build(context.Background(), repo, p.program, raceEnabled)
		if p.err == nil {
			testenv.AtExit(func() { os.RemoveAll(filepath.Dir(p.bin)) })
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.bin
}

// serveUpstreamMock runs upstream's mock behind the adapter, as node's provider,
// on a unix socket, until the test ends; it returns the socket's endpoint.
func serveUpstreamMock(t *testing.T, node string) string {
	t.Helper()
	bin := upstreamMockServer.build(t)
	dir, err := os.MkdirTemp("", "vku") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	stderr := &syncBuffer{}
	cmd := exec.Command(bin, "-kubeconfig", testenv.ControlPlane(t).KubeconfigPath, "-node", node, "-socket", sock)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		if strings.Contains(stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("a data race in upstream's mock behind the adapter:\n%s", stderr.String())
		} else if err != nil || t.Failed() {
			t.Logf("upstream's mock behind the adapter (%v):\n%s", err, stderr.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, "the provider's socket: " + stderr.String()
	})
	return "unix://" + sock
}

// Upstream virtual-kubelet's own mock provider, its source unchanged, runs a
// vkubelet node through the adapter: the node is configured as the mock
// configures it, a pod reaches Running, its logs and an exec go through the API
// server to the mock, and a deleted pod goes.
func TestUpstreamsMockRunsANodeThroughTheAdapter(t *testing.T) {
	const node = "upstream-mock"
	endpoint := serveUpstreamMock(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	cfgFile := filepath.Join(t.TempDir(), "remote.json")
	b, _ := json.Marshal(remote.Config{Endpoint: endpoint})
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.MockConfig(t, node, mock.Config{})
	cfg.Provider, cfg.ProviderConfig = "remote", cfgFile
	// A serving certificate from the cluster, which the API server verifies
	// when it proxies logs and exec.
	cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true
	nodetest.Run(t, cfg)
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 20 {
		t.Errorf("pods capacity %s, want the mock's 20", q.String())
	}
	if n.Labels["alpha.service-controller.kubernetes.io/exclude-balancer"] != "true" {
		t.Errorf("labels %v: the mock's are missing", n.Labels)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "up", corev1.PodRunning)

	// An update (labels) reaches the mock with the API's pod, status included,
	// which the mock keeps: the pod stays Running.
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "up", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"updated":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Never(t, 3*time.Second, 200*time.Millisecond, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "up", metav1.GetOptions{})
		if err != nil {
			return true, err.Error()
		}
		return p.Status.Phase != corev1.PodRunning, "the updated pod is " + string(p.Status.Phase)
	})

	// kubectl logs: the mock's logs are empty, and come back so.
	logs, err := c.CoreV1().Pods(ns).GetLogs("up", &corev1.PodLogOptions{Container: "main", TailLines: new(int64(10))}).DoRaw(ctx)
	if err != nil || len(logs) != 0 {
		t.Errorf("logs: %q, %v", logs, err)
	}
	// kubectl exec: the mock runs nothing and reports success.
	if out, err := testenv.Exec(t, ns, "up", "main", "echo", "hi"); err != nil || out != "" {
		t.Errorf("exec: %q, %v", out, err)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "up", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "up", metav1.GetOptions{})
		return err != nil, "the pod is still in the API"
	})
}

// Upstream's mock behind the adapter passes vkubelet's provider conformance
// suite (`vkubelet provider conformance`).
func TestUpstreamsMockThroughTheAdapterPassesTheConformanceSuite(t *testing.T) {
	const node = "upstream-mock-conformance"
	endpoint := serveUpstreamMock(t, node)
	var log bytes.Buffer
	cfg := conformance.Config{Remote: remote.Config{Endpoint: endpoint}, NodeName: node, Log: &log, Timeout: 30 * time.Second}
	cfg.Remote.Timeout.Duration = 30 * time.Second
	results, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance:\n%s", log.String())
	if err := conformance.Failed(results); err != nil {
		t.Error(err)
	}
}

// syncBuffer is a bytes.Buffer written by a child's output and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
