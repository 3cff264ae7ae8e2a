package deploy

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// The chart's uninstall hook: `helm uninstall` first runs `vkubelet remove-node`
// in a Job on the release's nodes (templates/uninstall.yaml), as a
// ServiceAccount allowed only that, before helm deletes the node's Deployment.

// The hook names the release's nodes, all of them, in the Job's arguments and
// in the rights its ServiceAccount holds; uninstall.removeNode=false renders
// none, and a timeout that is no duration is refused.
func TestTheUninstallHookRemovesTheReleasesNodesAlone(t *testing.T) {
	helm := helmRunner(t)
	chart := chartDir(t)
	out, err := helm("template", "vk", chart, "--namespace", "ops", "--show-only", "templates/uninstall.yaml",
		"--set", "nodes[0].name=n1,nodes[1].name=n2,uninstall.timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kind: Job", "helm.sh/hook: pre-delete", "- remove-node", "- --timeout=90s", "- n1\n", "- n2\n",
		`resourceNames: ["n1", "n2"]`, "verbs: [\"get\", \"patch\", \"delete\"]", "namespace: kube-node-lease",
		"resources: [\"pods/eviction\"]", "name: vk-vkubelet-ops-uninstall",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the uninstall hook has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "- vkubelet\n") {
		t.Error("the uninstall hook removes the default nodeName although the release runs a NodeSet")
	}
	if out, err := helm("template", "vk", chart, "--set", "uninstall.removeNode=false"); err != nil || strings.Contains(out, "remove-node") {
		t.Errorf("with uninstall.removeNode=false: %v, remove-node rendered: %v", err, strings.Contains(out, "remove-node"))
	}
	if out, err := helm("template", "vk", chart, "--set", "uninstall.timeout=soon"); err == nil || !strings.Contains(out, "at '/uninstall/timeout'") {
		t.Errorf("uninstall.timeout=soon: %v, %q; want the schema's refusal", err, out)
	}
}

// A NodeSet of two mock nodes runs a Deployment's pods, a bare pod and a
// DaemonSet's pods; `helm uninstall` removes both Nodes and their Leases, and
// every pod that was bound to them is gone, each stopped by its node (the
// node's Killing Event: the provider was asked to stop it; the mock runs in the
// node's process, so the next test watches a provider the test holds). The
// hook's Job, ServiceAccount and RBAC are gone with it, and the Nodes stay gone
// once the node process has stopped.
func testUninstallRemovesTheNodes(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const release, a, b = "uninstall", "chart-uninstall-a", "chart-uninstall-b"
	nodes := []string{a, b}
	mark := map[string]string{"vkubelet.test/release": ns + "-" + release}

	values := h.values(t, a)
	values["nodes"] = []map[string]any{{"name": a, "labels": mark}, {"name": b, "labels": mark}}
	install(t, helm, ns, release, values)
	for _, n := range nodes {
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
		testenv.WaitNodeReady(t, c, n, 2*time.Minute)
	}

	tolerate := []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}}
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeSelector: mark, Tolerations: tolerate,
				Containers: []corev1.Container{{Name: "main", Image: "busybox", Args: []string{"sleep", "3600"}}}},
		}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: selector("web"), Template: template("web")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runOn(t, c, ns, "solo", b)
	var bound map[types.UID]string
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		bound = map[types.UID]string{}
		running := 0
		for _, p := range podsOn(t, c, ns, nodes...) {
			bound[p.UID] = p.Name
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return len(bound) == 5 && running == 5, fmt.Sprintf("%d pods on the nodes, %d running; want the Deployment's 2, the DaemonSet's 2 and solo", len(bound), running)
	})

	start := time.Now()
	if out, err := helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m"); err != nil {
		describe(t, c, ns, a)
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("helm uninstall removed two nodes and %d pods in %s", len(bound), time.Since(start).Round(100*time.Millisecond))

	checkNodesRemoved(t, c, nodes...)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range pods.Items {
			if name, ok := bound[p.UID]; ok {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprintf("pods that were bound to the nodes still in the API: %q", left)
	})
	for uid, name := range bound {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
		if err != nil {
			t.Fatal(err)
		}
		killed := false
		for _, e := range evs.Items {
			killed = killed || e.Reason == pod.ReasonKilling && e.Source.Component == "vkubelet"
		}
		if !killed {
			t.Errorf("pod %s: no %s Event from its node, which stops a pod in the provider", name, pod.ReasonKilling)
		}
	}
	checkHookGone(t, c, ns, release)

	// The node process stops with its Deployment; it does not register the
	// removed Nodes again meanwhile.
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods of the release left", len(pods.Items))
	})
	for _, n := range nodes {
		if _, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("node %s once its process stopped: %v, want NotFound", n, err)
		}
	}
}

// The mock provider served by the test process over the provider protocol
// (the remote provider, on the host's loopback), so that the test sees what it
// runs; its pods take two seconds to stop. A PodDisruptionBudget that allows
// no disruption keeps one pod past uninstall.timeout: `helm uninstall` fails,
// printing the hook's log that names the pod, and deletes nothing, the node
// left cordoned. Without the budget, `helm uninstall` again removes the node,
// and each of its pods left the API only once the provider had stopped it (at
// most one copy: checked at the moment the watch sees it deleted), created
// there once; nothing is left running in the provider.
func testUninstallStopsThePodsInTheProviderFirst(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const release, node = "uninstall-remote", "chart-uninstall-remote"

	m, err := mock.New(mock.Config{StopDelay: mock.Duration{Duration: 2 * time.Second}}, node)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := serveProvider(t, m, node)
	values := h.values(t, node)
	values["provider"] = map[string]any{"name": "remote", "config": map[string]any{"endpoint": endpoint, "pollInterval": "1s"}}
	values["uninstall"] = map[string]any{"timeout": "30s"}
	install(t, helm, ns, release, values)
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)
	ran := map[string]types.UID{}
	for i := range 3 {
		p := runOn(t, c, ns, fmt.Sprintf("p-%d", i), node)
		ran[p.Name] = p.UID
	}

	// At each pod's removal from the API: is it still in the provider?
	removals := testenv.WatchRemovals(t, c, ns, func(p *corev1.Pod) error {
		if _, err := m.GetPod(context.Background(), p.Namespace, p.Name); !errdefs.IsNotFound(err) {
			return fmt.Errorf("it left the API while the provider still ran it")
		}
		return nil
	})

	// p-0 guarded by a budget the disruption controller says allows nothing.
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "p-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"guarded":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"guarded": "yes"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guard", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 1 && pdb.Status.DisruptionsAllowed == 0,
			fmt.Sprintf("budget's status %+v", pdb.Status)
	})
	start := time.Now()
	out, err := helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m")
	if err == nil {
		t.Fatalf("helm uninstall succeeded with a pod its budget keeps:\n%s", out)
	}
	t.Logf("helm uninstall failed in %s, as the budget kept p-0:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	for _, want := range []string{"the removal's --timeout of 30s passed with 1 pod still bound to the node: " + ns + "/p-0 (eviction refused: Cannot evict pod as it would violate the pod's disruption budget.", "kubectl uncordon"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm uninstall's output lacks %q:\n%s", want, out)
		}
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Fatalf("the node after the failed uninstall: %v; want it there, cordoned", err)
	}
	if _, err := c.AppsV1().Deployments(ns).Get(ctx, release+"-vkubelet", metav1.GetOptions{}); err != nil {
		t.Errorf("the node's Deployment after the failed uninstall: %v, want it there", err)
	}
	if err := c.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	if out, err := helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m"); err != nil {
		describe(t, c, ns, node)
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("helm uninstall, again, removed the node and its last pod in %s", time.Since(start).Round(100*time.Millisecond))

	checkNodesRemoved(t, c, node)
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		seen := removals.Seen()
		for name, uid := range ran {
			if seen[name].UID != uid {
				return false, fmt.Sprintf("pod %s not seen leaving the API yet", name)
			}
		}
		return true, ""
	})
	for name := range ran {
		if err := removals.Seen()[name].Err; err != nil {
			t.Errorf("pod %s: %v", name, err)
		}
	}
	for name, uid := range ran {
		if creates, deletes := m.CreateCount(uid), m.DeleteCalls(uid); creates != 1 || deletes < 1 {
			t.Errorf("pod %s: created %d times in the provider and deleted %d times; want 1 and at least 1", name, creates, deletes)
		}
	}
	if left := m.Pods(); len(left) != 0 {
		t.Errorf("%d pods still running in the provider after the uninstall", len(left))
	}
	checkHookGone(t, c, ns, release)
}

// serveProvider serves p, the provider of node, over the provider protocol on
// the host's loopback, where a node pod in the host's network reaches it,
// until the test ends; it returns the endpoint.
func serveProvider(t *testing.T, p provider.PodLifecycleHandler, node string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- remote.NewServer(ctx, p, node, nil).Serve(ctx, l, remote.ServeOptions{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving the provider: %v", err)
		}
	})
	return l.Addr().String()
}

// podsOn lists the pods of ns bound to the nodes.
func podsOn(t *testing.T, c kubernetes.Interface, ns string, nodes ...string) []corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var on []corev1.Pod
	for _, p := range pods.Items {
		for _, n := range nodes {
			if p.Spec.NodeName == n {
				on = append(on, p)
			}
		}
	}
	return on
}

// checkNodesRemoved waits until the nodes' Node objects and Leases are gone.
func checkNodesRemoved(t *testing.T, c kubernetes.Interface, nodes ...string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		var left []string
		for _, n := range nodes {
			if _, err := c.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("node %s (%v)", n, err))
			}
			if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("lease %s (%v)", n, err))
			}
		}
		return len(left) == 0, "left after helm uninstall: " + strings.Join(left, ", ")
	})
}

// checkHookGone waits until the uninstall hook's Job, ServiceAccount and RBAC
// are gone: the credential does not outlive the uninstall.
func checkHookGone(t *testing.T, c kubernetes.Interface, ns, release string) {
	t.Helper()
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=uninstall"}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		var left []string
		count := func(kind string, n int, err error) {
			if err != nil {
				left = append(left, kind+": "+err.Error())
			} else if n > 0 {
				left = append(left, fmt.Sprintf("%d %s", n, kind))
			}
		}
		jobs, err := c.BatchV1().Jobs(ns).List(ctx, selector)
		count("jobs", len(jobs.Items), err)
		sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, selector)
		count("serviceaccounts", len(sas.Items), err)
		crs, err := c.RbacV1().ClusterRoles().List(ctx, selector)
		count("clusterroles", len(crs.Items), err)
		crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, selector)
		count("clusterrolebindings", len(crbs.Items), err)
		roles, err := c.RbacV1().Roles(corev1.NamespaceNodeLease).List(ctx, selector)
		count("roles in kube-node-lease", len(roles.Items), err)
		rbs, err := c.RbacV1().RoleBindings(corev1.NamespaceNodeLease).List(ctx, selector)
		count("rolebindings in kube-node-lease", len(rbs.Items), err)
		sort.Strings(left)
		return len(left) == 0, "the uninstall hook left: " + strings.Join(left, ", ")
	})
}
