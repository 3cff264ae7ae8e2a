package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/fleet"
	"github.com/vkubelet/vkubelet/providers/kube"
)

// Two replicas share the two nodes of one NodeSet (kube provider, pods in a second
// cluster) by --leader-elect. The replica holding them is killed with SIGKILL in
// the middle of a burst of 200 pods: the other takes both nodes over, never before
// the first's election lease has run out and at most two (jittered) retries after,
// every source pod ends with exactly one pod in the target, and the target pods
// made before the kill keep their UIDs (adopted, not re-created).
// Then the new holder is killed in the middle of deleting them all, and a third
// replica finishes every deletion.
func TestAReplicaKilledMidBurstHandsItsNodesOverAndNothingIsLost(t *testing.T) {
	src := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	target, err := controlplane.Start(ctx, controlplane.Config{Dir: filepath.Join(t.TempDir(), "target")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Stop() })
	tc, err := kubernetes.NewForConfig(target.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	kubeCfg, _ := json.Marshal(kube.Config{Kubeconfig: target.KubeconfigPath, ClusterID: "src"})
	if err := os.WriteFile(filepath.Join(dir, "kube.json"), kubeCfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// The target has no nodes of its own: the file gives the nodes their capacity.
	nodeSet := "apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n  - name: ha-%d\n    count: 2\n    provider: kube\n    providerConfig: kube.json\n    capacity: {pods: \"500\", cpu: \"64\", memory: 256Gi}\n"
	if err := os.WriteFile(filepath.Join(dir, "nodes.yaml"), []byte(nodeSet), 0o644); err != nil {
		t.Fatal(err)
	}
	const leaseDuration, retryPeriod = 10 * time.Second, time.Second
	replica := func() *nodeProcess {
		return startNodeProcess(t, "run", "--config", filepath.Join(dir, "nodes.yaml"), "--kubeconfig", src.KubeconfigPath,
			"--self-signed-serving-cert", "--cert-dir", t.TempDir(),
			"--node-lease-duration=10s", "--node-lease-renew-interval=2s", "--status-poll-interval=1s",
			"--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-lease-duration", leaseDuration.String(),
			"--leader-elect-renew-deadline=7s", "--leader-elect-retry-period", retryPeriod.String())
	}
	nodes := []string{"ha-0", "ha-1"}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = c.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	first := replica()
	for _, n := range nodes {
		testenv.WaitNodeReady(t, c, n, 60*time.Second)
	}
	host, _ := os.Hostname()
	firstID := host + "_" + strconv.Itoa(first.cmd.Process.Pid)
	second := replica()
	secondID := host + "_" + strconv.Itoa(second.cmd.Process.Pid)
	holders := func() map[string]string {
		out := map[string]string{}
		for _, n := range nodes {
			h, err := fleet.Holder(ctx, c, ns, n)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = h
		}
		return out
	}
	time.Sleep(3 * time.Second) // the second replica tries, and stands by
	if h := holders(); h["ha-0"] != firstID || h["ha-1"] != firstID {
		t.Fatalf("holders %v, want both %s (the first replica)", h, firstID)
	}

	// The Leases as the test last saw them: the first replica's last renewal of
	// each, and when the second replica acquired it.
	lastRenew := map[string]time.Time{}
	acquired := map[string]time.Time{}
	readLeases := func() {
		for _, n := range nodes {
			l, err := c.CoordinationV1().Leases(ns).Get(ctx, fleet.LeaseName(n), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			switch ptr.Deref(l.Spec.HolderIdentity, "") {
			case firstID:
				if l.Spec.RenewTime != nil {
					lastRenew[n] = l.Spec.RenewTime.Time
				}
			case secondID:
				if _, ok := acquired[n]; !ok && l.Spec.AcquireTime != nil {
					acquired[n] = l.Spec.AcquireTime.Time
				}
			}
		}
	}

	const pods = 200
	var killedAt time.Time
	targetUIDs := map[string]string{} // origin UID → target UID, before the kill
	for i := 0; i < pods; i++ {
		if i == pods/2 {
			list, err := tc.CoreV1().Pods(ns+"-src").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Items {
				targetUIDs[p.Labels[kube.LabelOriginUID]] = string(p.UID)
			}
			if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killedAt = time.Now()
			readLeases() // before the burst goes on, however slow the machine
			t.Logf("first replica killed with %d of %d pods created, %d of them in the target", i, pods, len(targetUIDs))
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%d", i)},
			Spec: corev1.PodSpec{NodeName: nodes[i%2], Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				TerminationGracePeriodSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Each node's Lease is read until the second replica holds it. The last
	// renewal the first replica wrote stays in it until then (it renews no more),
	// and the second replica's acquire time is written beside it.
	var tookOver time.Duration
	testenv.Eventually(t, 3*leaseDuration, func() (bool, string) {
		readLeases()
		if len(acquired) == len(nodes) && tookOver == 0 {
			tookOver = time.Since(killedAt)
		}
		return tookOver > 0, fmt.Sprintf("holders %v", holders())
	})
	for _, n := range nodes {
		testenv.WaitNodeReady(t, c, n, 60*time.Second)
	}
	t.Logf("the second replica held both nodes %s after the kill (election lease %s)", tookOver.Round(100*time.Millisecond), leaseDuration)
	// Safety, whatever the machine's load: a candidate counts the lease from the
	// moment it saw the last renewal, which is after the renewal was written, so
	// no node was taken before the first replica's lease had run out.
	// Liveness: a candidate tries every retry period stretched by up to
	// client-go's JitterFactor, so it sees the last renewal at most one stretched
	// period late, and takes the Lease at most one more after it expired. Both
	// are read from the Lease's own times (written by the replicas), not from
	// when this test saw them; a second is allowed for the API server's answers
	// on a busy machine.
	bound := leaseDuration + 2*time.Duration((1+leaderelection.JitterFactor)*float64(retryPeriod)) + time.Second
	for _, n := range nodes {
		if lastRenew[n].IsZero() {
			t.Fatalf("never saw the first replica's last renewal of %s's Lease", n)
		}
		gap := acquired[n].Sub(lastRenew[n])
		t.Logf("%s taken %s after the first replica's last renewal", n, gap.Round(100*time.Millisecond))
		if gap < leaseDuration {
			t.Errorf("%s taken %s after the first replica's last renewal, before its lease of %s ran out", n, gap, leaseDuration)
		}
		if gap > bound {
			t.Errorf("%s taken %s after the first replica's last renewal, more than the lease duration %s and two jittered retry periods (%s)", n, gap, leaseDuration, bound)
		}
	}

	// Every source pod has one target pod; those made before the kill are the same.
	source, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		list, err := tc.CoreV1().Pods(ns+"-src").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		perOrigin := map[string]int{}
		for _, p := range list.Items {
			perOrigin[p.Labels[kube.LabelOriginUID]]++
		}
		missing, doubled := 0, 0
		for _, p := range source.Items {
			switch perOrigin[string(p.UID)] {
			case 0:
				missing++
			case 1:
			default:
				doubled++
			}
		}
		return missing == 0 && doubled == 0 && len(list.Items) == pods,
			fmt.Sprintf("%d target pods for %d source pods: %d missing, %d doubled", len(list.Items), len(source.Items), missing, doubled)
	})
	list, err := tc.CoreV1().Pods(ns+"-src").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recreated := 0
	for _, p := range list.Items {
		if before, ok := targetUIDs[p.Labels[kube.LabelOriginUID]]; ok && before != string(p.UID) {
			recreated++
		}
	}
	if recreated > 0 {
		t.Errorf("%d of the %d target pods made before the kill were re-created", recreated, len(targetUIDs))
	}

	// Then every pod is deleted, and the replica now holding the nodes is killed
	// in the middle: a third replica takes over and finishes every deletion, in
	// the target and in the source. Half of the target pods are held by a
	// finalizer of the test's until the kill, so the kill falls mid-deletion
	// however fast or slow the machine: the source pods of those can only go
	// once a replica sees their target pods gone, and only the third is left.
	// Their grace period outlasts the test, so none goes at its end instead.
	const hold = "test.vkubelet.io/hold"
	byUID := map[string]string{}
	for _, p := range source.Items {
		byUID[string(p.UID)] = p.Name
	}
	var held []string // target pods, of burst-i with i%4 < 2: both nodes have some
	for _, p := range list.Items {
		var i int
		if _, err := fmt.Sscanf(byUID[p.Labels[kube.LabelOriginUID]], "burst-%d", &i); err != nil {
			t.Fatalf("target pod %s: no source pod for its origin UID", p.Name)
		}
		if i%4 < 2 {
			held = append(held, p.Name)
		}
	}
	patchFinalizers := func(patch string) {
		for _, name := range held {
			if _, err := tc.CoreV1().Pods(ns+"-src").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	patchFinalizers(`{"metadata":{"finalizers":["` + hold + `"]}}`)
	third := replica()
	thirdID := host + "_" + strconv.Itoa(third.cmd.Process.Pid)
	testenv.DeleteAllPods(t, ns)
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == len(held), fmt.Sprintf("%d of %d pods left in the source, want the %d held", len(list.Items), pods, len(held))
	})
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt = time.Now()
	t.Logf("second replica killed with the %d held pods still in the source", len(held))
	patchFinalizers(`{"metadata":{"finalizers":null}}`)
	testenv.Eventually(t, 3*leaseDuration+time.Minute, func() (bool, string) {
		src, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		dst, err := tc.CoreV1().Pods(ns+"-src").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(src.Items) == 0 && len(dst.Items) == 0,
			fmt.Sprintf("%d pods left in the source, %d in the target; holders %v", len(src.Items), len(dst.Items), holders())
	})
	t.Logf("every deletion finished %s after the second kill", time.Since(killedAt).Round(100*time.Millisecond))
	if h := holders(); h["ha-0"] != thirdID || h["ha-1"] != thirdID {
		t.Errorf("holders %v, want both %s (the third replica)", h, thirdID)
	}
}
