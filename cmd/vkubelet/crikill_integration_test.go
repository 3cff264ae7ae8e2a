package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/cri"
)

// criPods counts, per pod UID, the ready sandboxes and running containers the
// runtime has.
func criPods(t *testing.T, rt runtimeapi.RuntimeServiceClient) (sandboxes, containers map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
	if err != nil {
		t.Fatal(err)
	}
	sandboxes, containers = map[string]int{}, map[string]int{}
	uidOf := map[string]string{}
	for _, sb := range sbs.Items {
		uidOf[sb.Id] = sb.Metadata.Uid
		sandboxes[sb.Metadata.Uid]++
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs.Containers {
		containers[uidOf[c.PodSandboxId]]++
	}
	return sandboxes, containers
}

// startCRI starts a containerd of the test's own and writes the CRI provider's
// configuration for it (quick retries and syncs); it returns the runtime's
// client and the configuration's path. Both go when the test ends.
func startCRI(t *testing.T) (env *crienv.Env, rt runtimeapi.RuntimeServiceClient, cfgPath string) {
	t.Helper()
	testenv.Require(t, crienv.Available())
	env, err := crienv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	b, _ := json.Marshal(cri.Config{RuntimeEndpoint: env.Socket, RootDir: t.TempDir(),
		BackoffBase: cri.Duration{Duration: time.Second}, SyncInterval: cri.Duration{Duration: 200 * time.Millisecond}})
	cfgPath = filepath.Join(t.TempDir(), "cri.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return env, runtimeapi.NewRuntimeServiceClient(conn), cfgPath
}

// The CRI provider under SIGKILL of the node process: killed while it creates 40
// real pods, restarted, every pod runs in exactly one sandbox with one container
// (those running at the kill never restarted), the pods deleted meanwhile are gone
// from the runtime; killed again while the pods are being deleted, restarted,
// every sandbox is removed. Before the fix, a container created but not yet
// started at the kill stayed so for good (the pod Pending in ContainerCreating).
func TestRestartAfterSIGKILLWithTheCRIProviderLeavesOneSandboxPerPod(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	env, rt, cfgPath := startCRI(t)
	const node = "vk-cri-crash"
	args := []string{"--nodename", node, "--kubeconfig", cp.KubeconfigPath, "--provider", "cri",
		"--provider-config", cfgPath, "--disable-taint", "--kubelet-port", "0", "--self-signed-serving-cert",
		"--cert-dir", t.TempDir(), "--node-lease-duration", "10s", "--node-lease-renew-interval", "2s",
		"--status-poll-interval", "1s", "--pod-sync-workers", "8", "--log-level", "debug"}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) })
	first := startNodeProcess(t, args...)
	testenv.WaitNodeReady(t, c, node, 60*time.Second)

	const total = 40
	created := make(chan int, total)
	var wg sync.WaitGroup
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p-" + strconv.Itoa(i)},
				Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{Name: "c", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			created <- i
		}(i)
	}
	// Kill the node once a third of the pods run in the runtime.
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, cs := criPods(t, rt)
		return len(cs) >= total/3, fmt.Sprintf("%d pods with a running container", len(cs))
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	wg.Wait()
	sbs, runningAtKill := criPods(t, rt)
	t.Logf("node killed with %d of %d pods in the runtime, %d of them running", len(sbs), total, len(runningAtKill))
	// While it is down: three pods removed at once, three asked to stop.
	gone := map[string]bool{}
	for i := 0; i < 3; i++ {
		for _, name := range []string{"p-" + strconv.Itoa(i), "p-" + strconv.Itoa(3+i)} {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gone[string(p.UID)] = true
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, "p-"+strconv.Itoa(i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, "p-"+strconv.Itoa(3+i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	second := startNodeProcess(t, args...)
	restarted := time.Now()
	// The pods not Running at the last look: if they stay so, what each process
	// logged about them (the logs printed at the end are only their tails).
	var stuckNames []string
	t.Cleanup(func() {
		if t.Failed() {
			logPodLines(t, "first process", first.log, ns, stuckNames)
			logPodLines(t, "restarted process", second.log, ns, stuckNames)
		}
	})
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		pods := podsOf(t, c, ns)
		run := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				run++
			}
		}
		sbs, cs := criPods(t, rt)
		var stuck []string
		stuckNames = stuckNames[:0]
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning {
				b, _ := json.Marshal(p.Status.ContainerStatuses)
				stuck = append(stuck, fmt.Sprintf("%s (%s, %d sandboxes, %d containers): %s %s", p.Name, p.Status.Phase, sbs[string(p.UID)], cs[string(p.UID)], p.Status.Message, b))
				stuckNames = append(stuckNames, p.Name)
			}
		}
		return len(pods) == total-6 && run == total-6 && len(sbs) == total-6 && len(cs) == total-6,
			fmt.Sprintf("%d pods in the API, %d Running; %d pods with sandboxes, %d with running containers; not running: %v", len(pods), run, len(sbs), len(cs), stuck)
	})
	t.Logf("converged %s after the restart", time.Since(restarted).Round(time.Millisecond))
	sbs, cs := criPods(t, rt)
	for _, p := range podsOf(t, c, ns) {
		if n, m := sbs[string(p.UID)], cs[string(p.UID)]; n != 1 || m != 1 {
			t.Errorf("pod %s: %d ready sandboxes and %d running containers, want 1 and 1", p.Name, n, m)
		}
		// A container that ran at the kill runs on; one whose start the kill
		// cut short has exited in the runtime and is started again, one restart
		// (as on a kubelet).
		restarts := p.Status.ContainerStatuses[0].RestartCount
		if runningAtKill[string(p.UID)] > 0 && restarts != 0 || restarts > 1 {
			t.Errorf("pod %s: %d restarts (running at the kill: %v)", p.Name, restarts, runningAtKill[string(p.UID)] > 0)
		}
	}
	for uid := range gone {
		if sbs[uid] != 0 {
			t.Errorf("a pod deleted while the node was down still has a sandbox (%s)", uid)
		}
	}

	// Kill it again while every pod is being deleted.
	testenv.DeleteAllPods(t, ns)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		sbs, _ := criPods(t, rt)
		return len(sbs) <= (total-6)*2/3, fmt.Sprintf("%d sandboxes left", len(sbs))
	})
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = second.cmd.Wait()
	sbs, _ = criPods(t, rt)
	t.Logf("node killed again with %d of %d sandboxes left", len(sbs), total-6)
	startNodeProcess(t, args...)
	restarted = time.Now()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		sbs, cs := criPods(t, rt)
		pods := podsOf(t, c, ns)
		return len(pods) == 0 && len(sbs) == 0 && len(cs) == 0,
			fmt.Sprintf("%d pods in the API, %d sandboxes, %d running containers", len(pods), len(sbs), len(cs))
	})
	t.Logf("every pod and sandbox gone %s after the second restart", time.Since(restarted).Round(time.Millisecond))
}

// logPodLines logs the lines of a node process's log about the named pods of
// namespace ns, the last maxLines of them.
func logPodLines(t *testing.T, what, logPath, ns string, names []string) {
	const maxLines = 80
	if len(names) == 0 {
		return
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Logf("%s log: %v", what, err)
		return
	}
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, name := range names {
			// "pod=ns/p-3" must not match p-31: the key ends the line or a field.
			key := "pod=" + ns + "/" + name
			if i := strings.Index(line, key); i >= 0 && (len(line) == i+len(key) || line[i+len(key)] == ' ') {
				lines = append(lines, line)
				break
			}
		}
	}
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	t.Logf("%s log, lines about %v (%d):\n%s", what, names, len(lines), strings.Join(lines, "\n"))
}
