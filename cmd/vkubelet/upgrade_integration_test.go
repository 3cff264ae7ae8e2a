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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/previous"
	"github.com/vkubelet/vkubelet/internal/lab/slurmenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/version"
	"github.com/vkubelet/vkubelet/providers/kube"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// upgradeStep is one process of a node's install replaced by this version's.
type upgradeStep int

const (
	upgradeNode     upgradeStep = iota // the node process (vkubelet)
	upgradeProvider                    // the provider process (vkubelet provider serve)
)

// TestAnUpgradeFromThePreviousVersionDisturbsNoPod runs pods on the previous
// version (package previous), stops it with SIGTERM as a rollout does, starts this
// version on the same state and checks that every pod kept its UID, its
// containers (IDs, start times, restart counts unchanged) and its single creation
// in the provider; then that the upgraded node still starts and deletes pods,
// and that stopping it (SIGTERM) leaves its Node object and its pods as they
// were. The mock runs in the node's process (its state in a file), and in a
// provider process of its own, upgraded after the node (an older provider
// behind a newer node) or before it (the reverse); the CRI provider runs real
// containers, the Slurm provider jobs of a real Slurm, the kube provider pods
// in a target cluster of its own.
func TestAnUpgradeFromThePreviousVersionDisturbsNoPod(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	old, err := previous.Build(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name    string
		backend func(t *testing.T, node string) *upgradeBackend
		steps   []upgradeStep // the processes replaced, in order
	}{
		{"mock in the node process", mockBackend(old, false), []upgradeStep{upgradeNode}},
		{"mock in a provider process, the node upgraded first", mockBackend(old, true), []upgradeStep{upgradeNode, upgradeProvider}},
		{"mock in a provider process, the provider upgraded first", mockBackend(old, true), []upgradeStep{upgradeProvider, upgradeNode}},
		{"CRI", criBackend, []upgradeStep{upgradeNode}},
		{"Slurm", slurmBackend, []upgradeStep{upgradeNode}},
		{"kube", kubeBackend, []upgradeStep{upgradeNode}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "vk-upgrade-" + strconv.Itoa(i)
			upgradeDisturbsNoPod(t, old, node, tc.backend(t, node), tc.steps)
		})
	}
}

// upgradeBackend is a provider an upgrade test runs pods on.
type upgradeBackend struct {
	// pods is how many pods run through the upgrade.
	pods int
	// args are the node's flags for the provider.
	args []string
	// spec is the spec of a pod the test runs on node.
	spec func(node string) corev1.PodSpec
	// upgrade replaces the provider's own process, if it has one, with this
	// version's.
	upgrade func(t *testing.T)
	// stop stops what the backend runs besides the node, once the node stopped.
	stop func(t *testing.T)
	// check compares what the provider runs with the pods in the API, each to
	// be created once and running in the provider, and nothing else.
	check func(t *testing.T, pods []corev1.Pod)
}

// mockBackend is the mock with its state in a file, in the node's process or,
// if separate, in a provider process started from the previous version.
func mockBackend(old string, separate bool) func(t *testing.T, node string) *upgradeBackend {
	return func(t *testing.T, node string) *upgradeBackend {
		mockCfg := mock.Config{StateFile: filepath.Join(t.TempDir(), "mock-state.json"), Pods: "200"}
		mockConfig := writeMockConfig(t, mockCfg)
		b := &upgradeBackend{
			pods: 30,
			args: []string{"--provider", "mock", "--provider-config", mockConfig},
			spec: func(node string) corev1.PodSpec {
				return corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
			},
			upgrade: func(t *testing.T) { t.Fatal("the mock in the node's process has no process of its own to upgrade") },
			stop:    func(*testing.T) {},
		}
		b.check = func(t *testing.T, pods []corev1.Pod) {
			t.Helper()
			checkMockState(t, mockCfg, node, pods)
		}
		if !separate {
			return b
		}
		sock := socketPath(t)
		var provider *nodeProcess
		start := func(bin string) { provider = serveMock(t, bin, mockConfig, node, sock) }
		b.args = []string{"--provider", "remote", "--provider-config", remoteConfigFor(t, sock)}
		b.upgrade = func(t *testing.T) {
			stopGracefully(t, provider, "provider process")
			start(binary)
		}
		b.stop = func(t *testing.T) { stopGracefully(t, provider, "provider process") }
		start(old)
		return b
	}
}

// criBackend is the CRI provider on a containerd of its own, running real
// containers that stop on SIGTERM.
func criBackend(t *testing.T, node string) *upgradeBackend {
	env, rt, cfgPath := startCRI(t)
	return &upgradeBackend{
		pods: 30,
		args: []string{"--provider", "cri", "--provider-config", cfgPath},
		spec: func(node string) corev1.PodSpec {
			return corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](2),
				Containers: []corev1.Container{{Name: "c", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}}}}
		},
		upgrade: func(t *testing.T) { t.Fatal("the CRI provider has no process of its own to upgrade") },
		stop:    func(*testing.T) {},
		check: func(t *testing.T, pods []corev1.Pod) {
			t.Helper()
			sbs, cs := criPods(t, rt)
			for _, p := range pods {
				if n, m := sbs[string(p.UID)], cs[string(p.UID)]; n != 1 || m != 1 {
					t.Errorf("pod %s: %d ready sandboxes and %d running containers, want 1 and 1", p.Name, n, m)
				}
				delete(sbs, string(p.UID))
			}
			if len(sbs) != 0 {
				t.Errorf("the runtime has sandboxes of %d pods that are not in the API", len(sbs))
			}
		},
	}
}

// slurmBackend is the Slurm provider on a Slurm cluster of its own, each pod a
// job running its containers with podman.
func slurmBackend(t *testing.T, node string) *upgradeBackend {
	env, reg, _, cfgPath := slurmenv.StartForTest(t, slurmenv.Options{})
	// jobs are the job states Slurm has for the pod (its jobs are named by
	// the pod's UID), or for every pod with uid "".
	jobs := func(t *testing.T, uid types.UID) []string {
		t.Helper()
		args := []string{"--noheader", "--states=all", "--format=%T"}
		if uid != "" {
			args = append(args, "--name="+string(uid))
		}
		cmd := exec.Command("squeue", args...)
		cmd.Env = env.Environ()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("squeue: %v: %s", err, out)
		}
		return strings.Fields(string(out))
	}
	return &upgradeBackend{
		// Each pod is a podman container in a Slurm job: a few are enough.
		pods: 5,
		args: []string{"--provider", "slurm", "--provider-config", cfgPath},
		spec: func(node string) corev1.PodSpec {
			return corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](2),
				Containers: []corev1.Container{{Name: "c", Image: reg.Busybox,
					Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}}}}
		},
		upgrade: func(t *testing.T) { t.Fatal("the Slurm provider has no process of its own to upgrade") },
		stop:    func(*testing.T) {},
		check: func(t *testing.T, pods []corev1.Pod) {
			t.Helper()
			for _, p := range pods {
				if got := jobs(t, p.UID); len(got) != 1 || got[0] != "RUNNING" {
					t.Errorf("pod %s: Slurm jobs %v, want one RUNNING", p.Name, got)
				}
			}
			running := 0
			for _, state := range jobs(t, "") {
				if state == "RUNNING" {
					running++
				}
			}
			if running != len(pods) {
				t.Errorf("Slurm runs %d jobs for the %d pods in the API", running, len(pods))
			}
		},
	}
}

// kubeBackend is the kube provider offloading to a target cluster of its own,
// whose one node is a mock node of this version.
func kubeBackend(t *testing.T, node string) *upgradeBackend {
	ctx := context.Background()
	target, err := controlplane.Start(ctx, controlplane.Config{Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Stop() })
	tc, err := kubernetes.NewForConfig(target.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	startNodeProcess(t, "--nodename", "worker", "--kubeconfig", target.KubeconfigPath, "--provider", "mock",
		"--provider-config", writeMockConfig(t, mock.Config{}), "--disable-taint", "--kubelet-port", "0",
		"--approve-serving-csr", "--cert-dir", t.TempDir(), "--status-poll-interval", "1s")
	testenv.WaitNodeReady(t, tc, "worker", 90*time.Second)
	js, err := json.Marshal(kube.Config{Kubeconfig: target.KubeconfigPath, ClusterID: "source",
		PingTimeout: providerutil.Duration{Duration: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kube.json")
	if err := os.WriteFile(cfgPath, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return &upgradeBackend{
		pods: 30,
		args: []string{"--provider", "kube", "--provider-config", cfgPath},
		spec: func(node string) corev1.PodSpec {
			return corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
		},
		upgrade: func(t *testing.T) { t.Fatal("the kube provider has no process of its own to upgrade") },
		stop:    func(*testing.T) {},
		check: func(t *testing.T, pods []corev1.Pod) {
			t.Helper()
			for _, p := range pods {
				copies, err := tc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelOriginUID + "=" + string(p.UID)})
				if err != nil {
					t.Fatal(err)
				}
				if n := len(copies.Items); n != 1 || copies.Items[0].Status.Phase != corev1.PodRunning || copies.Items[0].DeletionTimestamp != nil {
					t.Errorf("pod %s has %d copies in the target, want one Running", p.Name, n)
				}
			}
			all, err := tc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelOffloadedBy})
			if err != nil {
				t.Fatal(err)
			}
			if len(all.Items) != len(pods) {
				t.Errorf("the target has %d copies for the %d pods in the API", len(all.Items), len(pods))
			}
		},
	}
}

func upgradeDisturbsNoPod(t *testing.T, old, node string, backend *upgradeBackend, steps []upgradeStep) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) })
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	args := append([]string{"--nodename", node, "--kubeconfig", cp.KubeconfigPath}, backend.args...)
	args = append(args, "--disable-taint", "--log-level", "debug", "--metrics-addr", metricsAddr,
		"--kubelet-port", "0", "--approve-serving-csr", "--cert-dir", t.TempDir(),
		"--node-lease-duration", "10s", "--node-lease-renew-interval", "2s", "--status-poll-interval", "1s")
	nodeProc := startBinary(t, old, args...)
	testenv.WaitNodeVersion(t, c, node, version.KubernetesVersion+"-vkubelet-"+previous.Version)

	total := backend.pods
	create := func(name string) {
		t.Helper()
		_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backend.spec(node)},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < total; i++ {
		create("p-" + strconv.Itoa(i))
	}
	before := map[string]string{}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		running := 0
		for _, p := range podsOf(t, c, ns) {
			if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 {
				running++
				before[p.Name] = testenv.ContainerInstances(&p)
			}
		}
		return running == total, fmt.Sprintf("%d of %d pods Running on the previous version", running, total)
	})

	for n, step := range steps {
		switch step {
		case upgradeNode:
			stopGracefully(t, nodeProc, "node process")
			nodeProc = startBinary(t, binary, args...)
			testenv.WaitNodeVersion(t, c, node, version.KubeletVersion())
		case upgradeProvider:
			backend.upgrade(t)
		}
		// The node, whichever version it runs, still starts pods.
		name := "after-step-" + strconv.Itoa(n)
		create(name)
		testenv.WaitPhase(t, ns, name, corev1.PodRunning)
	}
	// This version's node has gone through every pod at least once since it
	// started, with nothing left queued: what it would do to them, it has done.
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		syncs := testenv.MetricSum(t, metricsAddr, "vkubelet_workqueue_adds_total", `name="pod_sync"`)
		depth := testenv.MetricSum(t, metricsAddr, "vkubelet_workqueue_depth", `name="pod_sync"`)
		return syncs >= float64(total) && depth == 0, fmt.Sprintf("the upgraded node queued %v pod syncs, %v still queued", syncs, depth)
	})

	// Deleting still works, and still waits for the provider.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "p-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "p-0", metav1.GetOptions{})
		return err != nil, fmt.Sprintf("p-0 is still in the API after its deletion (%v)", err)
	})
	delete(before, "p-0")

	pods := podsOf(t, c, ns)
	for _, p := range pods {
		was, ok := before[p.Name]
		if !ok {
			continue
		}
		delete(before, p.Name)
		if now := testenv.ContainerInstances(&p); now != was || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("pod %s after the upgrade: %s, deleted %v, %s; before: %s", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, now, was)
		}
	}
	for name := range before {
		t.Errorf("pod %s is gone from the API after the upgrade", name)
	}

	// The provider's own record, once every process stopped: stopping the node
	// leaves the pods running in the provider.
	stopGracefully(t, nodeProc, "node process")
	backend.stop(t)
	backend.check(t, pods)
	// The node stopped, as on an operator's SIGTERM: its Node object stays, and
	// so do its pods, each as it was.
	if _, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node object after the node process stopped: %v", err)
	}
	for _, p := range podsOf(t, c, ns) {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("pod %s after the node process stopped: %s, deleted %v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
}
