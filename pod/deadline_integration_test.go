package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// A pod that runs past its activeDeadlineSeconds is stopped and Failed with
// reason DeadlineExceeded, as on a kubelet, whatever the provider does with
// deadlines: the provider is asked to stop it once, it is not started again,
// it is not Ready, and its containers end up terminated.
func TestAPodIsStoppedAtItsActiveDeadline(t *testing.T) {
	// The pod's containers take 3 s to stop, and report ready meanwhile.
	prov := newMockOf(t, mock.Config{StopDelay: mock.Duration{Duration: 3 * time.Second}}, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	p := createPod(t, c, ns, node, appPod("deadline", func(s *corev1.PodSpec) { s.ActiveDeadlineSeconds = ptr.To[int64](3) }))
	waitRunning(t, c, ns, "deadline")
	// Failed is not Ready, from the first write that says Failed.
	failed := testenv.WaitPod(t, ns, "deadline", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if ready := podCondition(failed, corev1.PodReady); ready.Status != corev1.ConditionFalse || ready.Reason != "PodCompleted" {
		t.Errorf("the pod Failed with Ready %s (%s)", ready.Status, ready.Reason)
	}
	waitDeadlineExceeded(t, c, prov, ns, "deadline", p.UID)
}

// A deadline set on a running pod, here one it has already passed, is judged
// when the change comes, not at some later check.
func TestAShortenedDeadlineIsJudgedAtOnce(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	p := createPod(t, c, ns, node, appPod("later", nil))
	waitRunning(t, c, ns, "later")
	time.Sleep(2 * time.Second) // the pod has run for longer than the deadline it gets
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), "later", types.StrategicMergePatchType,
		[]byte(`{"spec":{"activeDeadlineSeconds":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeadlineExceeded(t, c, prov, ns, "later", p.UID)
}

func waitDeadlineExceeded(t *testing.T, c kubernetes.Interface, prov *mock.Provider, ns, name string, uid types.UID) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p := getPod(t, c, ns, name)
		terminated := len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil
		ready := podCondition(p, corev1.PodReady)
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == pod.ReasonDeadlineExceeded && terminated &&
				ready.Status == corev1.ConditionFalse,
			fmt.Sprintf("pod is %s (%s: %s), Ready %s, containers %+v; want Failed (DeadlineExceeded), not Ready, its container terminated",
				p.Status.Phase, p.Status.Reason, p.Status.Message, ready.Status, p.Status.ContainerStatuses)
	})
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		events, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=" + pod.ReasonDeadlineExceeded})
		if err != nil {
			t.Fatal(err)
		}
		return len(events.Items) == 1 && events.Items[0].Type == corev1.EventTypeNormal,
			fmt.Sprintf("%d DeadlineExceeded Events, want one, Normal as the kubelet's", len(events.Items))
	})
	time.Sleep(2 * time.Second) // the pod would have been started again by now
	if n, m := prov.CreateCount(uid), prov.DeleteCalls(uid); n != 1 || m != 1 {
		t.Errorf("provider created the pod %d times and was asked to stop it %d times; want once each", n, m)
	}
	if p := getPod(t, c, ns, name); p.Status.Phase != corev1.PodFailed {
		t.Errorf("pod went on to %s", p.Status.Phase)
	}
}

// A pod that waits for a missing Secret has a start time from its first status,
// as on a kubelet, and fails at its deadline though its provider never had it;
// the Secret appearing afterwards starts nothing.
func TestAPodWaitingForASecretFailsAtItsDeadline(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	p := secretEnvPod("waits")
	p.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
	createPod(t, c, ns, node, p)
	waitConfigError(t, c, ns, "waits")
	if got := getPod(t, c, ns, "waits"); got.Status.StartTime == nil {
		t.Error("a pod waiting for a Secret has no start time; the kubelet gives it one")
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got := getPod(t, c, ns, "waits")
		return got.Status.Phase == corev1.PodFailed && got.Status.Reason == pod.ReasonDeadlineExceeded,
			fmt.Sprintf("pod is %s (%s)", got.Status.Phase, got.Status.Reason)
	})
	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"},
		StringData: map[string]string{"token": "abc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the pod would have been handed over by now
	if n := len(prov.Pods()); n != 0 {
		t.Errorf("the provider was given %d pods after the deadline; want none", n)
	}
	if got := getPod(t, c, ns, "waits"); got.Status.Phase != corev1.PodFailed {
		t.Errorf("pod went on to %s", got.Status.Phase)
	}
}
