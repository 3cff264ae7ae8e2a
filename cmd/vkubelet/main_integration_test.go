package main

import (
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
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
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
	// The flags of `make build`, so the two share one compilation.
	build := exec.Command("go", "build", "-trimpath", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
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
	return startBinary(t, binary, args...)
}

// startBinary starts bin (this version's binary, or another's) with args, its
// output logged and shown when the test fails; the process is killed when the
// test ends.
func startBinary(t *testing.T, bin string, args ...string) *nodeProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "vkubelet.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
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
			t.Logf("log of %s %s:\n%s", bin, strings.Join(args, " "), tail(string(b), 40))
		}
	})
	return p
}

// stopGracefully stops p with SIGTERM, as a rollout or an operator does, and
// fails the test unless it exits cleanly.
func stopGracefully(t *testing.T, p *nodeProcess, what string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the %s did not stop cleanly on SIGTERM: %v", what, err)
	}
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

// TestRestartAfterSIGKILLCreatesEveryPodExactlyOnce kills the node process while it
// creates 1,000 pods, changes the API while it is down, restarts it, and checks that
// the provider ends up with exactly the API's pods, each created once: with the mock
// in the node's process (its state in a file) and in a provider process of its own.
func TestRestartAfterSIGKILLCreatesEveryPodExactlyOnce(t *testing.T) {
	for _, m := range mockPlacements {
		t.Run(m.name, func(t *testing.T) { restartAfterSIGKILLCreatesEveryPodExactlyOnce(t, m) })
	}
}

func restartAfterSIGKILLCreatesEveryPodExactlyOnce(t *testing.T, m mockPlacement) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	node := "vk-crash" + m.suffix()
	stateFile := filepath.Join(t.TempDir(), "mock-state.json")
	mockCfg := mock.Config{StateFile: stateFile, Pods: "2000"}
	providerArgs, stopProvider := m.providerArgs(t, node, mockCfg)
	args := append([]string{"--nodename", node, "--kubeconfig", cp.KubeconfigPath}, providerArgs...)
	args = append(args, "--disable-taint", "--log-level", "debug",
		"--kubelet-port", "0", "--approve-serving-csr", "--cert-dir", t.TempDir(),
		"--node-lease-duration", "10s", "--node-lease-renew-interval", "2s", "--status-poll-interval", "1s")

	begin := time.Now()
	first := startNodeProcess(t, args...)
	testenv.WaitNodeReady(t, c, node, 60*time.Second)
	t.Logf("first node ready after %s", time.Since(begin).Round(time.Millisecond))

	const total = 1000
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
	stopGracefully(t, second, "node process")
	t.Logf("stopped %s after the restart", time.Since(restarted).Round(time.Millisecond))
	stopProvider()

	// Read the provider's persisted state back and compare it with the API.
	checkMockState(t, mockCfg, node, podsOf(t, c, ns))
	if n := len(podsOf(t, c, ns)); n != total-20 {
		t.Errorf("%d pods in the API, want %d", n, total-20)
	}
}

// checkMockState reads the state the mock with cfg kept for node (its
// StateFile) and checks it against pods, the node's pods in the API: each
// created once in the provider and running there, and no other pod there.
func checkMockState(t *testing.T, cfg mock.Config, node string, pods []corev1.Pod) {
	t.Helper()
	prov, err := mock.New(cfg, node)
	if err != nil {
		t.Fatal(err)
	}
	provPods, err := prov.GetPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inProvider := map[types.UID]bool{}
	for _, p := range provPods {
		inProvider[p.UID] = true
	}
	for _, p := range pods {
		if n := prov.CreateCount(p.UID); n != 1 {
			t.Errorf("pod %s was created %d times in the provider", p.Name, n)
		}
		if !inProvider[p.UID] {
			t.Errorf("pod %s is in the API but not in the provider", p.Name)
		}
		delete(inProvider, p.UID)
	}
	if len(inProvider) != 0 {
		t.Errorf("the provider runs %d pods that are not in the API", len(inProvider))
	}
}

func podsOf(t *testing.T, c kubernetes.Interface, ns string) []corev1.Pod {
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestRestartAfterSIGKILLMidDeletionLosesNoDeletion runs 1,000 pods, deletes them
// all, kills the node process while the deletions are under way, restarts it, and
// checks that every pod is stopped in the provider (its persisted state is empty)
// and removed from the API: no deletion is lost to the crash. The mock runs in the
// node's process, then in a provider process of its own.
func TestRestartAfterSIGKILLMidDeletionLosesNoDeletion(t *testing.T) {
	for _, m := range mockPlacements {
		t.Run(m.name, func(t *testing.T) { restartAfterSIGKILLMidDeletionLosesNoDeletion(t, m) })
	}
}

func restartAfterSIGKILLMidDeletionLosesNoDeletion(t *testing.T, m mockPlacement) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const total = 1000
	node := "vk-crash-delete" + m.suffix()
	stateFile := filepath.Join(t.TempDir(), "mock-state.json")
	// Stopping takes a few seconds, so that the crash comes in the middle of it.
	mockCfg := mock.Config{StateFile: stateFile, Pods: "2000", StopDelay: mock.Duration{Duration: 5 * time.Second}}
	providerArgs, stopProvider := m.providerArgs(t, node, mockCfg)
	args := append([]string{"--nodename", node, "--kubeconfig", cp.KubeconfigPath}, providerArgs...)
	args = append(args, "--disable-taint",
		"--kubelet-port", "0", "--self-signed-serving-cert", "--cert-dir", t.TempDir(),
		"--node-lease-duration", "10s", "--node-lease-renew-interval", "2s", "--status-poll-interval", "1s")
	first := startNodeProcess(t, args...)
	testenv.WaitNodeReady(t, c, node, 60*time.Second)

	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "d-" + strconv.Itoa(i)},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
					TerminationGracePeriodSeconds: ptr.To[int64](30)},
			}, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		run := 0
		for _, p := range podsOf(t, c, ns) {
			if p.Status.Phase == corev1.PodRunning {
				run++
			}
		}
		return run == total, fmt.Sprintf("%d of %d pods Running", run, total)
	})

	testenv.DeleteAllPods(t, ns)
	// Kill the node once a third of the pods are gone from the API.
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		left := len(podsOf(t, c, ns))
		return left <= total*2/3, fmt.Sprintf("%d pods left", left)
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	t.Logf("node killed with %d of %d pods still in the API", len(podsOf(t, c, ns)), total)

	second := startNodeProcess(t, args...)
	restarted := time.Now()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		left := len(podsOf(t, c, ns))
		return left == 0, fmt.Sprintf("%d pods left in the API", left)
	})
	t.Logf("every pod removed %s after the restart", time.Since(restarted).Round(time.Millisecond))
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		b, _ := os.ReadFile(second.log)
		return strings.Contains(string(b), "virtual node ready"), "second node not ready"
	})
	stopGracefully(t, second, "node process")
	stopProvider()
	prov, err := mock.New(mockCfg, node)
	if err != nil {
		t.Fatal(err)
	}
	provPods, err := prov.GetPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(provPods) != 0 {
		t.Errorf("the provider still runs %d pods whose API pods were deleted", len(provPods))
	}
}
