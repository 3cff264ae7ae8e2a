package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/node"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// removeNode runs `vkubelet remove-node` with args against the test's control
// plane and returns its output and exit error.
func removeNode(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"remove-node", "--kubeconfig", testenv.ControlPlane(t).KubeconfigPath}, args...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("vkubelet remove-node %s: %v (%s)", strings.Join(args, " "), err, time.Since(start).Round(100*time.Millisecond))
	return string(out), err
}

// `vkubelet remove-node` against a running node (the mock in its process, its
// pods two seconds to stop): a pod a PodDisruptionBudget guards (its status
// written as the disruption controller would, which the test's control plane
// does not run: no disruption allowed) keeps the node past --timeout, which
// fails naming it and why, and leaves the Node cordoned, the other pods
// stopped and gone; without the budget, a second run removes the last pod, the
// Node and its Lease, and the node process does not register it again; a third
// finds nothing to do and succeeds. Each pod left the API only once the
// provider had stopped it (the mock's state file, read when the watch sees it
// deleted), created there once; the provider runs nothing at the end.
func TestRemoveNodeDrainsARunningNodeAndDeletesIt(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const name = "vk-remove"
	mockCfg := mock.Config{StateFile: filepath.Join(t.TempDir(), "mock-state.json"), StopDelay: mock.Duration{Duration: 2 * time.Second}}
	p := startNodeProcess(t, "--nodename", name, "--kubeconfig", cp.KubeconfigPath,
		"--provider", "mock", "--provider-config", writeMockConfig(t, mockCfg), "--disable-taint",
		"--kubelet-port", "0", "--self-signed-serving-cert", "--cert-dir", t.TempDir(),
		"--node-lease-duration", "10s", "--node-lease-renew-interval", "2s", "--status-poll-interval", "1s")
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	testenv.WaitNodeReady(t, c, name, time.Minute)

	uids := map[string]types.UID{}
	for _, pod := range []string{"a", "b", "guarded"} {
		created, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Labels: map[string]string{"app": pod}},
			Spec:       corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[pod] = created.UID
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		run := 0
		for _, p := range podsOf(t, c, ns) {
			if p.Status.Phase == corev1.PodRunning {
				run++
			}
		}
		return run == 3, fmt.Sprintf("%d of 3 pods Running", run)
	})
	// The budget's status as the disruption controller would write it.
	pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation,
		DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// At each pod's removal from the API: does the provider still run it?
	removals := testenv.WatchRemovals(t, c, ns, func(pod *corev1.Pod) error {
		prov, err := mock.New(mockCfg, name)
		if err != nil {
			return err
		}
		if _, err := prov.GetPod(context.Background(), pod.Namespace, pod.Name); !errdefs.IsNotFound(err) {
			return fmt.Errorf("the provider still ran it")
		}
		return nil
	})
	seenDeleted := func(n int) { t.Helper(); removals.Wait(t, n, time.Minute) }

	out, err := removeNode(t, "--timeout", "10s", name)
	if err == nil {
		t.Fatalf("remove-node succeeded with a pod a budget guards:\n%s", out)
	}
	for _, want := range []string{
		"vkubelet: node " + name + ": the removal's --timeout of 10s passed with ",
		ns + "/guarded (eviction refused: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget guard needs 1 healthy pods and has 1 currently)",
		"kubectl uncordon",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("remove-node's output lacks %q:\n%s", want, out)
		}
	}
	n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !node.BeingRemoved(n) {
		t.Fatalf("the node after a removal that ran out of time: %v; want it there, cordoned and marked", err)
	}
	seenDeleted(2)

	if err := c.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := removeNode(t, "--timeout", "2m", name); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seenDeleted(3)
	if _, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node after remove-node: %v, want NotFound", err)
	}
	if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node's lease after remove-node: %v, want NotFound", err)
	}
	// The node process saw its Node deleted and, the Node marked, decided not
	// to register it again (where it would have at once): the log says so.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), "node removed (it was deleted after it was marked for removal)"), "the node process has not logged its node's removal"
	})
	if _, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node while its process still runs: %v, want NotFound", err)
	}
	if out, err := removeNode(t, name); err != nil {
		t.Errorf("remove-node of a node already removed: %v\n%s", err, out)
	}

	stopGracefully(t, p, "node process")
	for pod, r := range removals.Seen() {
		if r.Err != nil {
			t.Errorf("pod %s left the API: %v", pod, r.Err)
		}
	}
	prov, err := mock.New(mockCfg, name)
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := prov.GetPods(ctx); len(left) != 0 {
		t.Errorf("the provider still runs %d pods", len(left))
	}
	for pod, uid := range uids {
		if n := prov.CreateCount(uid); n != 1 {
			t.Errorf("pod %s was created %d times in the provider, want 1", pod, n)
		}
	}
}
