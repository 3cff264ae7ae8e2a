package pod_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// Two nodes share one pod watch: each runs its own pods and only those; a node
// whose controller starts after its pods were bound finds them in the shared
// cache; a pod of a node without a controller is left alone; a node that stops
// and starts again takes its pods up again; deleting a pod reaches its node only.
func TestNodesSharingAPodSourceEachRunTheirOwnPods(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := pod.NewSource(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The nodes' queues share one timer for their delayed adds, as in a NodeSet.
	timer := sharedtimer.New(nil)
	sourceDone, timerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(sourceDone); src.Run(ctx) }()
	go func() { defer close(timerDone); timer.Run(ctx) }()
	defer func() { cancel(); <-sourceDone; <-timerDone }()

	nodes := []string{"src-a-" + ns, "src-b-" + ns, "src-none-" + ns}
	for _, node := range nodes {
		// Without its Node, the pod garbage collector would delete a node's pods.
		if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	}
	providers := map[string]*mock.Provider{}
	start := func(node string) (stop func()) {
		p, ok := providers[node]
		if !ok {
			p = newMock(t, node)
			providers[node] = p
		}
		ctrl, err := pod.NewController(pod.Config{Client: c, NodeName: node, Provider: p, Source: src, Timer: timer,
			StatusPollInterval: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stopRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ctrl.Run(runCtx) }()
		select {
		case <-ctrl.Ready():
		case err := <-done:
			t.Fatalf("controller of %s stopped: %v", node, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("controller of %s not ready", node)
		}
		return func() {
			stopRun()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	newPod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(0)),
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}

	stopA := start(nodes[0])
	createPod(t, c, ns, nodes[0], newPod("on-a"))
	createPod(t, c, ns, nodes[1], newPod("on-b")) // before b's controller runs
	createPod(t, c, ns, nodes[2], newPod("on-none"))
	waitRunning(t, c, ns, "on-a")
	stopB := start(nodes[1])
	defer stopB()
	waitRunning(t, c, ns, "on-b")

	providerPods := func(node string) []string { return providerPodNames(t, providers[node]) }
	for node, want := range map[string]string{nodes[0]: "[on-a]", nodes[1]: "[on-b]"} {
		if got := providerPods(node); len(got) != 1 || "["+got[0]+"]" != want {
			t.Errorf("provider of %s runs %v, want %s", node, got, want)
		}
	}
	if p := getPod(t, c, ns, "on-none"); p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("the pod of a node without a controller: phase %s, statuses %v", p.Status.Phase, p.Status.ContainerStatuses)
	}

	// a stops; a pod bound to it meanwhile is run once a starts again.
	stopA()
	createPod(t, c, ns, nodes[0], newPod("on-a-later"))
	stopA = start(nodes[0])
	defer stopA()
	waitRunning(t, c, ns, "on-a-later")

	if err := c.CoreV1().Pods(ns).Delete(ctx, "on-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := providerPods(nodes[1])
		return len(got) == 0, "node b's provider still runs " + strings.Join(got, ", ")
	})
	if got := providerPods(nodes[0]); len(got) != 2 {
		t.Errorf("node a's provider runs %v after b's pod was deleted, want on-a and on-a-later", got)
	}
}
