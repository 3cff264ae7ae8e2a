package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/leakcheck"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
	"github.com/vkubelet/vkubelet/providers/mock"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{})
}

const nodeSet = `apiVersion: vkubelet.io/v1alpha1
kind: NodeSet
nodes:
  - name: fleet-alpha
    labels: {site: east}
    taints: [{key: dedicated, value: hpc, effect: NoSchedule}]
    capacity: {pods: "5000"}
  - name: fleet-mock-%%d
    count: %d
    start: %d
`

// A NodeSet of three nodes runs in one process: each registers with the file's
// labels, taints and capacity and runs its pods. Applying a changed file stops the
// removed node (its lease is no longer renewed), starts the added one, and leaves
// the untouched node and its pod alone. Stopped, the fleet leaves nothing behind.
func TestANodeSetRunsItsNodesAndFollowsChangesToIt(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	before := leakcheck.Take()
	f := mustNew(t, Config{Base: nodetest.MockConfig(t, "unused", mock.Config{})})
	t.Cleanup(func() {
		f.Stop()
		before.Check(t, 15*time.Second)
	})
	nodes, err := nodeconfig.Parse(fmt.Appendf(nil, nodeSet, 2, 0), "/")
	if err != nil {
		t.Fatal(err)
	}
	if started, _ := f.Apply(ctx, nodes); len(started) != 3 {
		t.Fatalf("started %v", started)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	alpha, err := c.CoreV1().Nodes().Get(ctx, "fleet-alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := alpha.Status.Capacity[corev1.ResourcePods]
	var taints []string
	for _, tn := range alpha.Spec.Taints {
		taints = append(taints, tn.ToString())
	}
	if alpha.Labels["site"] != "east" || pods.Value() != 5000 || fmt.Sprint(taints) != "[virtual-kubelet.io/provider=mock:NoSchedule dedicated=hpc:NoSchedule]" {
		t.Errorf("fleet-alpha: labels %v, pods capacity %s, taints %v", alpha.Labels, pods.String(), taints)
	}
	for _, node := range []string{"fleet-alpha", "fleet-mock-0", "fleet-mock-1"} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "on-" + node},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(0)),
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"fleet-alpha", "fleet-mock-0", "fleet-mock-1"} {
		testenv.WaitPhase(t, ns, "on-"+node, corev1.PodRunning)
		// Through the API server (authenticated by its client certificate and
		// authorized by a SubjectAccessReview) to the node's kubelet API, whose
		// authenticator and authorizer the nodes share. The nodes' serving
		// certificates are self-signed here, as kubectl logs
		// --insecure-skip-tls-verify-backend accepts.
		if b, err := c.CoreV1().Pods(ns).GetLogs("on-"+node, &corev1.PodLogOptions{InsecureSkipTLSVerifyBackend: true}).DoRaw(ctx); err != nil {
			t.Errorf("logs of the pod on %s: %v (%s)", node, err, b)
		}
	}
	alphaPod, err := c.CoreV1().Pods(ns).Get(ctx, "on-fleet-alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// fleet-mock-0 stays, fleet-mock-1 goes, fleet-mock-2 comes.
	nodes, err = nodeconfig.Parse(append(fmt.Appendf(nil, nodeSet, 1, 0), "  - name: fleet-mock-2\n"...), "/")
	if err != nil {
		t.Fatal(err)
	}
	started, stopped := f.Apply(ctx, nodes)
	if fmt.Sprint(started, stopped) != "[fleet-mock-2] [fleet-mock-1]" {
		t.Errorf("started %v, stopped %v", started, stopped)
	}
	if err := f.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	lease := func() time.Time {
		l, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, "fleet-mock-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.RenewTime.Time
	}
	renewed := lease()
	time.Sleep(5 * time.Second) // more than two renew intervals of the test nodes (2s)
	if again := lease(); !again.Equal(renewed) {
		t.Errorf("the removed node's lease was renewed at %s after the change", again)
	}
	// The untouched node kept its pod as it was: not started again by a new provider.
	now, err := c.CoreV1().Pods(ns).Get(ctx, "on-fleet-alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Status.ContainerStatuses[0].RestartCount != 0 || !now.Status.StartTime.Equal(alphaPod.Status.StartTime) {
		t.Errorf("the untouched node's pod: restarts %d, start time %s (was %s)",
			now.Status.ContainerStatuses[0].RestartCount, now.Status.StartTime, alphaPod.Status.StartTime)
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-fleet-mock-2"},
		Spec:       corev1.PodSpec{NodeName: "fleet-mock-2", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "on-fleet-mock-2", corev1.PodRunning)
	for _, n := range []string{"fleet-alpha", "fleet-mock-0", "fleet-mock-1", "fleet-mock-2"} {
		_ = c.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}

// A node with a deep queue takes no work from another node of the process: a
// pod bound to a quiet node runs while a slow node still works through a burst
// of 200 pods bound before it. Each node has its own queues and workers; the
// shared pod watch only routes events. Each of the slow node's provider calls
// takes a minute, so its burst lasts far longer than creating it, however
// slow the machine (at 200 ms a call a loaded machine created the pods no
// faster than the node ran them, and there was no queue to wait behind).
func TestABusyNodeDoesNotHoldUpAQuietOne(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	dir := t.TempDir()
	for name, conf := range map[string]string{"slow.json": `{"latency": "1m"}`, "quick.json": `{}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := mustNew(t, Config{Base: nodetest.MockConfig(t, "unused", mock.Config{})})
	t.Cleanup(f.Stop)
	busy, quiet := "fair-busy-"+ns, "fair-quiet-"+ns
	nodes, err := nodeconfig.Parse(fmt.Appendf(nil, `apiVersion: vkubelet.io/v1alpha1
kind: NodeSet
nodes:
  - name: %s
    providerConfig: %s
  - name: %s
    providerConfig: %s
`, busy, filepath.Join(dir, "slow.json"), quiet, filepath.Join(dir, "quick.json")), "/")
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(ctx, nodes)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{busy, quiet} {
			_ = c.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(0)),
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	const burst = 200
	for i := range burst {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("busy-%d", i), busy), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod("quiet", quiet), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	testenv.WaitPhase(t, ns, "quiet", corev1.PodRunning)
	took := time.Since(created)
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + busy})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	t.Logf("the quiet node's pod ran %s after it was created, when %d of the busy node's %d pods were Running", took.Round(time.Millisecond), running, burst)
	// The busy node's ten workers finish their first calls a minute after the burst
	// began: a pod that waited for a worker, or behind the queue, runs after them.
	if running >= 10 {
		t.Errorf("the quiet node's pod ran only once %d of the busy node's %d pods had: it waited behind them", running, burst)
	}
}
