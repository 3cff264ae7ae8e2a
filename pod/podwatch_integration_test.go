package pod_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
)

// runScoped runs a pod controller of node with client c and scope until the
// test ends, once it is ready; its log goes to the returned buffer.
func runScoped(t *testing.T, c kubernetes.Interface, node string, scope pod.WatchScope) (*testenv.Buffer, func() []string) {
	t.Helper()
	prov := newMock(t, node)
	log := &testenv.Buffer{}
	runController(t, pod.Config{Client: c, NodeName: node, Provider: prov, PodWatch: scope,
		StatusPollInterval: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(log, nil))})
	return log, func() []string { return providerPodNames(t, prov) }
}

func createNodes(t *testing.T, c kubernetes.Interface, names ...string) {
	t.Helper()
	for _, node := range names {
		// Without its Node, the pod garbage collector would delete a node's pods.
		if _, err := c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	}
}

func plainPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(0)), AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// A node that watches every bound pod runs its own pods, those bound before it
// started and after, and no other node's, of which it sees every event; a
// deletion reaches it.
func TestANodeWatchingBoundPodsRunsItsOwnOnly(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	mine, theirs := "watch-a-"+ns, "watch-b-"+ns
	createNodes(t, c, mine, theirs)
	createPod(t, c, ns, mine, plainPod("mine-before"))
	createPod(t, c, ns, theirs, plainPod("theirs-before"))

	_, running := runScoped(t, c, mine, pod.WatchBoundPods)
	createPod(t, c, ns, theirs, plainPod("theirs-after"))
	createPod(t, c, ns, mine, plainPod("mine-after"))
	waitRunning(t, c, ns, "mine-before")
	waitRunning(t, c, ns, "mine-after")
	if got := strings.Join(running(), ","); got != "mine-after,mine-before" && got != "mine-before,mine-after" {
		t.Errorf("the provider runs %s, want mine-before and mine-after", got)
	}
	for _, name := range []string{"theirs-before", "theirs-after"} {
		if p := getPod(t, c, ns, name); p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 {
			t.Errorf("%s, another node's pod: phase %s, statuses %v", name, p.Status.Phase, p.Status.ContainerStatuses)
		}
	}

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "mine-after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := strings.Join(running(), ",")
		return got == "mine-before", "the provider runs " + got
	})
}

// A node identity may watch its own pods only (the Node authorizer): in auto, the
// node's watch of every bound pod is refused, it says so, and watches its own.
func TestANodeIdentityInAutoWatchesItsOwnPods(t *testing.T) {
	// Before v1.32 the Node authorizer lets a node list and watch every pod
	// (a node's watch of every bound pod was allowed in the skew run against
	// v1.31.4, and auto kept it, as it should).
	testenv.RequireKubernetes(t, 32, "the Node authorizer's refusal of a node's watch of other nodes' pods (AuthorizeNodeWithSelectors)")
	admin := testenv.Client(t)
	ns := testenv.Namespace(t)
	node := "watch-id-" + ns
	createNodes(t, admin, node)
	kubeconfig, err := testenv.ControlPlane(t).UserKubeconfig("node-"+ns, "system:node:"+node, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	log, _ := runScoped(t, asNode, node, pod.WatchAuto)
	createPod(t, admin, ns, node, plainPod("p"))
	waitRunning(t, admin, ns, "p")
	if !strings.Contains(log.String(), "not allowed to watch every bound pod") {
		t.Errorf("no word of the refused watch in the log:\n%s", log)
	}
}
