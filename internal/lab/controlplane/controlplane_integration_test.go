package controlplane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) {
	// The SIGKILL test re-runs this binary as a child that starts a control plane.
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true})
}

func TestSchedulerBindsPodToReadyNode(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	nodeName := "cp-test-node"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	node, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods: resource.MustParse("110"),
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	node.Status.Allocatable = node.Status.Capacity
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			// No kubelet keeps this node's status fresh, so it may be tainted
			// not-ready or unreachable at any moment; the test is about binding.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "unbound", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == nodeName, fmt.Sprintf("pod bound to %q", p.Spec.NodeName)
	})
}

func TestControllerManagerCreatesDeploymentPods(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		rs, err := c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(rs.Items) == 1 && len(pods.Items) == 3,
			fmt.Sprintf("%d ReplicaSets, %d pods", len(rs.Items), len(pods.Items))
	})
}

func TestSecondRunReusesCachedBinaries(t *testing.T) {
	testenv.ControlPlane(t) // TestMain has built or found the binaries already
	var out bytes.Buffer
	bins, err := controlplane.EnsureBinaries(context.Background(), &out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "building") || strings.Count(out.String(), "using cached") != 2 {
		t.Fatalf("expected both binary sets to come from the cache, got:\n%s", out.String())
	}
	v, err := exec.Command(bins.APIServer, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), controlplane.KubernetesVersion) {
		t.Fatalf("kube-apiserver --version = %q, %v; want %s", v, err, controlplane.KubernetesVersion)
	}
}

func TestTwoControlPlanesSideBySide(t *testing.T) {
	first := testenv.ControlPlane(t)
	var out bytes.Buffer
	second, err := controlplane.Start(context.Background(), controlplane.Config{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	t.Logf("second control plane: %s", strings.TrimSpace(out.String()))
	if first.URL == second.URL || first.EtcdURL == second.EtcdURL {
		t.Fatalf("control planes share an address: %s/%s and %s/%s", first.URL, first.EtcdURL, second.URL, second.EtcdURL)
	}
	// Each is a separate cluster: a namespace created in one is absent from the other.
	c1, _ := first.Client()
	c2, _ := second.Client()
	ctx := context.Background()
	ns, err := c2.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "only-in-second-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
		t.Fatalf("namespace %s created in the second control plane is visible in the first", ns.Name)
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(second.Dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left the state directory %s behind: %v", second.Dir, err)
	}
}

func TestAPIServerRestartKeepsState(t *testing.T) {
	testenv.ControlPlane(t)
	cp, err := controlplane.Start(context.Background(), controlplane.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	c, _ := cp.Client()
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "survives"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "survives", metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver still answers after StopAPIServer")
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "survives", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

const childEnv = "VKUBELET_CONTROLPLANE_TEST_CHILD"

// runChild starts a full control plane, prints its PIDs as one JSON line and waits
// to be killed.
func runChild() {
	cp, err := controlplane.Start(context.Background(), controlplane.Config{Scheduler: true, ControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, _ := json.Marshal(cp.PIDs())
	fmt.Println(string(b))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	cp.Stop()
}

func TestSIGKILLOfParentLeavesNoProcesses(t *testing.T) {
	testenv.ControlPlane(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child gave no PIDs: %v\n%s", err, stderr.String())
	}
	var pids map[string]int
	if err := json.Unmarshal([]byte(line), &pids); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if pids[name] == 0 {
			t.Fatalf("child reports no %s: %v", name, pids)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		var alive []string
		for name, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		return len(alive) == 0, "still running: " + strings.Join(alive, ", ")
	})
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
