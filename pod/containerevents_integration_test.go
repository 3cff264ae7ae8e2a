package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// refusingMain is the mock reporting its pods' container "main" waiting, never
// created, in CreateContainerConfigError, as a provider refusing its
// configuration does.
type refusingMain struct{ *mock.Provider }

const refusal = "container has runAsNonRoot and image will run as root"

func refuseMain(s *corev1.PodStatus) *corev1.PodStatus {
	s = s.DeepCopy()
	s.Phase = corev1.PodPending
	for i := range s.ContainerStatuses {
		s.ContainerStatuses[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: pod.ReasonCreateContainerConfigError, Message: refusal}}
		s.ContainerStatuses[i].Ready = false
	}
	return s
}

func (p refusingMain) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	s, err := p.Provider.GetPodStatus(ctx, ns, name)
	if s != nil {
		s = refuseMain(s)
	}
	return s, err
}

func (p refusingMain) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	p.Provider.NotifyPods(ctx, func(pod *corev1.Pod) {
		pod = pod.DeepCopy()
		pod.Status = *refuseMain(&pod.Status)
		notify(pod)
	})
}

// A container the provider could not create or start is told in a Warning
// Event "Failed" ("Error: " and the waiting message), as the kubelet tells it,
// once per failure however often the status is checked.
func TestAContainerThatCannotStartIsToldInAnEvent(t *testing.T) {
	c, node := startController(t, refusingMain{newMock(t, "")})
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, appPod("refused", nil))
	testenv.WaitPod(t, ns, "refused", "waiting", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil
	})
	var count int32
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		events, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=refused,reason=" + pod.ReasonFailed})
		if err != nil {
			t.Fatal(err)
		}
		ok := len(events.Items) == 1 && events.Items[0].Type == corev1.EventTypeWarning && events.Items[0].Message == "Error: "+refusal
		if ok {
			count = events.Items[0].Count
		}
		return ok, fmt.Sprintf("Failed Events %+v, want one Warning %q", events.Items, "Error: "+refusal)
	})
	time.Sleep(3 * time.Second) // status checks go on (polls every 500 ms)
	events, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=refused,reason=" + pod.ReasonFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 || events.Items[0].Count != count {
		t.Errorf("the failure was told again: %+v", events.Items)
	}
}
