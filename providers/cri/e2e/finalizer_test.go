package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A deleted pod that a finalizer keeps in the API shows how it ended, as on a
// kubelet: its containers terminated with the runtime's exit codes and times,
// and the pod in a terminal phase. Here its preStop hook outlasts the grace
// period the delete gave: the container is stopped when that ends.
func TestADeletedPodKeptByAFinalizerShowsHowItEnded(t *testing.T) {
	const node = "cri-e2e-finalizer"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("kept", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	pod.Finalizers = []string{"example.com/keep"}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 20}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.CoreV1().Pods(ns).Patch(ctx, "kept", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	testenv.WaitPod(t, ns, "kept", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if err := c.CoreV1().Pods(ns).Delete(ctx, "kept", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(3))}); err != nil {
		t.Fatal(err)
	}
	deleting, err := c.CoreV1().Pods(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	graceEnds := deleting.DeletionTimestamp.Time
	got := testenv.WaitPod(t, ns, "kept", "ended, kept by its finalizer", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	cs := got.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Terminated == nil {
		t.Fatalf("status %s %+v; want its container terminated", got.Status.Phase, cs)
	}
	// The stop at the grace period's end sends SIGTERM first, as the
	// kubelet's does, which the container may answer by exiting 0.
	if code := cs[0].State.Terminated.ExitCode; (code == 0) != (got.Status.Phase == corev1.PodSucceeded) {
		t.Errorf("phase %s with exit code %d; want Succeeded for 0, else Failed", got.Status.Phase, code)
	}
	// Killed when the grace period ended (the API's times are in seconds).
	if end := cs[0].State.Terminated.FinishedAt; end.Time.Before(graceEnds.Add(-time.Second)) || end.Time.After(graceEnds.Add(10*time.Second)) {
		t.Errorf("the container finished at %s; want when the grace period ended, %s", end, graceEnds)
	}
	// The object is the node's to leave: its final delete was sent, and only
	// the finalizer holds it.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "kept", metav1.GetOptions{})
		return err == nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0,
			fmt.Sprintf("deletion grace period %v, %v; want 0 (the node's final delete)", p.DeletionGracePeriodSeconds, err)
	})
}
