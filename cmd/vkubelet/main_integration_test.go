package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/controlplane"
	"github.com/vkubelet/vkubelet/internal/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// binary is the vkubelet command built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vkubelet-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "vkubelet")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building vkubelet: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testenv.Main(m, controlplane.Config{})
}

// nodeProcess is a `vkubelet` child process.
type nodeProcess struct {
	cmd *exec.Cmd
	log string
}

func startNodeProcess(t *testing.T, args ...string) *nodeProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "vkubelet.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProcess{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("vkubelet log:\n%s", tail(string(b), 40))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeMockConfig(t *testing.T, cfg mock.Config) string {
	b, _ := json.Marshal(cfg)
	p := filepath.Join(t.TempDir(), "mock.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitNodeReady(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, "Ready=" + string(cond.Status)
			}
		}
		return false, "no Ready condition"
	})
}

// TestRestartAfterSIGKILLCreatesEveryPodExactlyOnce kills the node process while it
// creates 200 pods, changes the API while it is down, restarts it, and checks that
// the provider ends up with exactly the API's pods, each created once.
func TestRestartAfterSIGKILLCreatesEveryPodExactlyOnce(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "vk-crash"
	stateFile := filepath.Join(t.TempDir(), "mock-state.json")
	mockCfg := mock.Config{StateFile: stateFile}
	args := []string{"--nodename", node, "--kubeconfig", cp.KubeconfigPath, "--provider", "mock",
		"--provider-config", writeMockConfig(t, mockCfg), "--disable-taint", "--log-level", "debug",
		"--kubelet-port", "0", "--approve-serving-csr", "--cert-dir", t.TempDir(),
		"--node-lease-duration", "10s", "--node-lease-renew-interval", "2s", "--status-poll-interval", "1s"}

	begin := time.Now()
	first := startNodeProcess(t, args...)
	waitNodeReady(t, c, node)
	t.Logf("first node ready after %s", time.Since(begin).Round(time.Millisecond))

	const total = 200
	created := make(chan int, total)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p-" + strconv.Itoa(i)},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			created <- i
		}(i)
	}
	// Kill the node in the middle of the creations.
	for i := 0; i < total/3; i++ {
		<-created
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	wg.Wait()
	runningBefore := 0
	for _, p := range podsOf(t, c, ns) {
		if p.Status.Phase == corev1.PodRunning {
			runningBefore++
		}
	}
	t.Logf("node killed with %d of %d pods Running", runningBefore, total)

	// While the node is down: remove ten pods at once (force) and ask for ten to stop
	// gracefully; the provider must lose the first ten and stop the others.
	for i := 0; i < 10; i++ {
		if err := c.CoreV1().Pods(ns).Delete(ctx, "p-"+strconv.Itoa(i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, "p-"+strconv.Itoa(10+i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	second := startNodeProcess(t, args...)
	restarted := time.Now()
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		pods := podsOf(t, c, ns)
		run := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				run++
			}
		}
		return len(pods) == total-20 && run == total-20, fmt.Sprintf("%d pods in the API, %d Running", len(pods), run)
	})
	t.Logf("converged %s after the restart", time.Since(restarted).Round(time.Millisecond))
	// Stop the node the way an operator would; the provider keeps its pods.
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("vkubelet did not stop cleanly on SIGTERM: %v", err)
	}
	t.Logf("stopped %s after the restart", time.Since(restarted).Round(time.Millisecond))

	// Read the provider's persisted state back and compare it with the API.
	prov, err := mock.New(mockCfg, node)
	if err != nil {
		t.Fatal(err)
	}
	provPods, err := prov.GetPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inProvider := map[types.UID]bool{}
	for _, p := range provPods {
		inProvider[p.UID] = true
	}
	apiPods := podsOf(t, c, ns)
	for _, p := range apiPods {
		if n := prov.CreateCount(p.UID); n != 1 {
			t.Errorf("pod %s created %d times in the provider", p.Name, n)
		}
		if !inProvider[p.UID] {
			t.Errorf("pod %s is Running in the API but not in the provider", p.Name)
		}
		delete(inProvider, p.UID)
	}
	if len(inProvider) != 0 {
		t.Errorf("%d provider pods have no API pod", len(inProvider))
	}
	if len(provPods) != total-20 {
		t.Errorf("provider runs %d pods, want %d", len(provPods), total-20)
	}
}

func podsOf(t *testing.T, c kubernetes.Interface, ns string) []corev1.Pod {
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestUpPrintsKubeconfigAndRunsPods runs `vkubelet up` as a user would.
func TestUpPrintsKubeconfigAndRunsPods(t *testing.T) {
	testenv.ControlPlane(t) // the binaries are built; `up` starts its own cluster
	dir := filepath.Join(t.TempDir(), "up")
	cmd := exec.Command(binary, "up", "--dir", dir, "--kubelet-port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 10)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(3 * time.Minute):
		t.Fatalf("vkubelet up printed nothing; stderr:\n%s", stderr.String())
	}
	path, ok := strings.CutPrefix(line, "export KUBECONFIG=")
	if !ok {
		t.Fatalf("first line = %q, want export KUBECONFIG=<path>", line)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c := kubernetes.NewForConfigOrDie(restCfg)
	waitNodeReady(t, c, "vkubelet")
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		_, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// What `kubectl run hello --image=busybox` does: no node name, no toleration.
	if _, err := c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "vkubelet", fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("vkubelet up exited with %v on SIGTERM; stderr:\n%s", err, stderr.String())
	}
	for l := range lines {
		t.Errorf("vkubelet up printed more than one line on stdout: %q", l)
	}
	// Nothing it started outlives it.
	out, _ := exec.Command("pgrep", "-f", dir).Output()
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Fatalf("processes of the stopped cluster remain: %s", s)
	}
}
