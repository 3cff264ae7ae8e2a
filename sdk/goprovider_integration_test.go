package sdk_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, controlplane.Config{}) }

// buildExample builds examples/go-provider, a module of its own, as `make build`
// builds vkubelet (static, trimmed paths), and returns the binary's path.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vkubelet-instant")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Dir = filepath.Join("..", "examples", "go-provider")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/go-provider: %v\n%s\n(after a change of vkubelet's go.mod, run go mod tidy there)", err, out)
	}
	return bin
}

// TestAGoProviderInAModuleOfItsOwnRunsPods builds examples/go-provider, whose
// main registers its provider, instant, through package sdk, and checks that
// the binary lists it with the built-in ones, and that a node run on it with
// its configuration file takes the capacity the file gives, runs a pod bound to
// it (on the node's address), deletes it, and stops cleanly on SIGTERM.
func TestAGoProviderInAModuleOfItsOwnRunsPods(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	bin := buildExample(t)

	out, err := exec.Command(bin, "providers").Output()
	if err != nil {
		t.Fatalf("providers: %v", err)
	}
	if got := strings.Fields(string(out)); !slices.Contains(got, "instant") || !slices.Contains(got, "mock") {
		t.Fatalf("providers printed %q, want instant among the built-in ones", got)
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "instant.json")
	if err := os.WriteFile(config, []byte(`{"capacity": {"pods": "42"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const node = "vk-go-provider"
	logPath := filepath.Join(dir, "node.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command(bin, "--provider", "instant", "--provider-config", config, "--nodename", node, "--address", "127.0.0.1",
		"--kubeconfig", cp.KubeconfigPath, "--kubelet-port", "0", "--self-signed-serving-cert", "--cert-dir", filepath.Join(dir, "certs"),
		"--disable-taint", "--log-level", "debug")
	run.Stdout, run.Stderr = logFile, logFile
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		_ = run.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("node log:\n%s", b)
		}
		_ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})

	testenv.Eventually(t, time.Minute, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods := n.Status.Capacity[corev1.ResourcePods]
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return pods.Value() == 42, fmt.Sprintf("Ready, capacity %s pods", pods.String())
			}
		}
		return false, "not Ready"
	})

	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := testenv.WaitPod(t, ns, "p", "Running and Ready", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				return p.Status.Phase == corev1.PodRunning && cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	if pod.Status.HostIP != "127.0.0.1" {
		t.Errorf("the pod's hostIP is %q, want the node's --address, 127.0.0.1, which the provider was built with", pod.Status.HostIP)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("pod p still there: %v", err)
	})

	// The program stops as vkubelet does.
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the clean-up
		if err != nil {
			t.Errorf("the node did not stop cleanly on SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the node did not stop within 30 s of SIGTERM")
	}
}
