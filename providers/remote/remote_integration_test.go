package remote_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
)

func TestMain(m *testing.M) {
	// The scheduler places the kube provider's pods (conformance) on a node.
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true, NodeMonitorGracePeriod: 8 * time.Second})
}

// serveMock serves a mock provider, whose state lives in stateFile, on a unix
// socket at sock until the returned stop is called.
func serveMock(t *testing.T, sock, stateFile, node string) (*mock.Provider, func()) {
	t.Helper()
	p, err := mock.New(mock.Config{StateFile: stateFile}, node)
	if err != nil {
		t.Fatal(err)
	}
	return p, serveAt(t, sock, p, "mock")
}

// A node with --provider remote runs pods in a provider of another process:
// resolved environment and volume files reach it, and logs (followed), exec and
// port-forward work through the API server. When the provider goes away the node
// goes NotReady; when it comes back (its state kept) the node is Ready again and
// its pod was created once.
func TestANodeRunsItsPodsInARemoteProvider(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "remote-mock"
	dir, err := os.MkdirTemp("", "vkr") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, state := filepath.Join(dir, "p.sock"), filepath.Join(dir, "state.json")
	_, stopServing := serveMock(t, sock, state, node)

	runRemoteNode(t, node, "unix://"+sock)

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello over the protocol"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "far"},
		Spec: corev1.PodSpec{NodeName: node,
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Args: []string{"line one", "line two"},
				Env:          []corev1.EnvVar{{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "greeting"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/config"}}}}},
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "far", corev1.PodRunning)

	if out, err := testenv.Exec(t, ns, "far", "main", "env"); err != nil || !strings.Contains(out, "GREETING=hello over the protocol") {
		t.Errorf("exec env: %q, %v", out, err)
	}
	if out, err := testenv.Exec(t, ns, "far", "main", "cat", "/etc/config/greeting"); err != nil || out != "hello over the protocol" {
		t.Errorf("exec cat of the volume file: %q, %v", out, err)
	}

	// kubectl exec -it: stdin and a terminal across (the mock echoes the command
	// line, then its stdin); an exit code comes back.
	out, err := testenv.ExecInteractive(t, ns, "far", "main", strings.NewReader("typed in\n"), true, "cat")
	if err != nil || !strings.Contains(out, "typed in") {
		t.Errorf("exec -it: %q, %v", out, err)
	}
	var exitErr utilexec.ExitError
	if _, err := testenv.Exec(t, ns, "far", "main", "sh", "-c", "exit 3"); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("exec of exit 3: %v, want exit status 3", err)
	}

	// kubectl logs -f: the lines as they come, until we stop reading.
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	rc, err := c.CoreV1().Pods(ns).GetLogs("far", &corev1.PodLogOptions{Follow: true}).Stream(lctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(rc)
	var lines []string
	for len(lines) < 2 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	rc.Close()
	cancel()
	if strings.Join(lines, "|") != "line one|line two" {
		t.Errorf("followed logs: %q (%v)", lines, sc.Err())
	}

	// kubectl port-forward: the mock echoes what it gets.
	local, stopForwarding := testenv.PortForward(t, ns, "far", 8080)
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("ping through two hops\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	echo, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	stopForwarding()
	if echo != "ping through two hops\n" {
		t.Errorf("port-forward echo: %q, %v", echo, err)
	}

	// The provider goes away: the node goes NotReady, nothing is deleted.
	stopServing()
	waitReady(t, node, corev1.ConditionUnknown)
	// It comes back with its state: Ready again, the pod created once.
	p, _ := serveMock(t, sock, state, node)
	waitReady(t, node, corev1.ConditionTrue)
	testenv.WaitPhase(t, ns, "far", corev1.PodRunning)
	if n := p.CreateCount(created.UID); n != 1 {
		t.Errorf("the pod was created %d times in the provider", n)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "far", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "far", metav1.GetOptions{})
		pods, _ := p.GetPods(ctx)
		return err != nil && len(pods) == 0, fmt.Sprintf("API: %v; provider: %d pods", err, len(pods))
	})
}

func waitReady(t *testing.T, node string, want corev1.ConditionStatus) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		n, err := testenv.Client(t).CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == want, fmt.Sprintf("Ready=%s", cond.Status)
			}
		}
		return false, "no Ready condition"
	})
}

// runRemoteNode runs node in the test, with --provider remote on endpoint and a
// serving certificate the API server verifies (for logs, exec and
// port-forward), and deletes its Node at the end of the test.
func runRemoteNode(t *testing.T, node, endpoint string) {
	t.Helper()
	cfgFile := filepath.Join(t.TempDir(), "remote.json")
	b, _ := json.Marshal(remote.Config{Endpoint: endpoint})
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.MockConfig(t, node, mock.Config{})
	cfg.Provider, cfg.ProviderConfig = "remote", cfgFile
	cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true
	nodetest.Run(t, cfg)
	t.Cleanup(func() {
		_ = testenv.Client(t).CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
}
