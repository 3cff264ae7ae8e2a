package pod

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A status write comes back through the watch as an update of the pod's
// status. The controller knows it is its own (the API server's answer to the
// write tells the stored status) and does not ask the provider again; a
// status someone else writes is still checked against the provider and put
// right.
func TestTheStatusWrittenComingBackIsNotCheckedAgain(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := "echo-" + ns
	// Without its Node, the pod garbage collector would delete the pod.
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	prov := &countingStatus{fakeProvider: newFakeProvider()}
	ctrl, err := NewController(Config{Client: c, NodeName: node, Provider: prov,
		StatusPollInterval: time.Hour, // only the watch and the writes queue status checks
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ctrl.Run(runCtx) }()
	defer func() { stop(); <-done }()

	p := newPod("echo")
	p.Namespace, p.UID, p.Spec.NodeName = ns, "", node
	if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statusChecks := func() int { return int(prov.calls.Load()) }
	// settled waits until the controller's cache has the pod's status ready as
	// want says, and then for its queues to run dry.
	settled := func(step string, want corev1.ConditionStatus) {
		t.Helper()
		for {
			cp, err := ctrl.pods.getCached(ns, "echo")
			if err == nil {
				if p, err := cp.WithStatus(); err == nil && podReady(&p.Status) == want {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: the cached pod's Ready condition never was %s", step, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for quiet := 0; quiet < 25; quiet++ { // half a second with nothing queued
			if ctrl.statusQueue.Len() > 0 || ctrl.syncQueue.Len() > 0 {
				quiet = 0
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	settled("started", corev1.ConditionTrue)
	if n := statusChecks(); n != 1 {
		t.Errorf("the pod started with %d status checks, want 1 (its write coming back is not checked)", n)
	}

	// The node-lifecycle controller marks the pod not Ready while it cannot reach the node.
	cur, err := c.CoreV1().Pods(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == corev1.PodReady {
			cur.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	settled("put right", corev1.ConditionTrue)
	if n := statusChecks(); n != 2 {
		t.Errorf("after someone else's status write, %d status checks in all, want 2", n)
	}
}

// countingStatus counts GetPodStatus calls.
type countingStatus struct {
	*fakeProvider
	calls atomic.Int32
}

func (c *countingStatus) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	c.calls.Add(1)
	return c.fakeProvider.GetPodStatus(ctx, ns, name)
}

func podReady(s *corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
