package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// conditionless is the mock reporting its pods' containers and no condition,
// like a provider that only knows its containers.
type conditionless struct{ *mock.Provider }

func (p conditionless) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	s, err := p.Provider.GetPodStatus(ctx, ns, name)
	if s != nil {
		s = s.DeepCopy()
		s.Conditions = nil
	}
	return s, err
}

func (p conditionless) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	p.Provider.NotifyPods(ctx, func(pod *corev1.Pod) {
		pod = pod.DeepCopy()
		pod.Status.Conditions = nil
		notify(pod)
	})
}

// A provider that reports only its containers still gets the pod the
// conditions the kubelet works out from them, so that waiting for Ready works.
func TestConditionsAreWorkedOutForAProviderThatReportsNone(t *testing.T) {
	c, node := startController(t, conditionless{newMock(t, "")})
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, appPod("bare", func(s *corev1.PodSpec) {
		s.InitContainers = []corev1.Container{{Name: "migrate", Image: "busybox"}}
	}))
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p := getPod(t, c, ns, "bare")
		var got []string
		ok := p.Status.Phase == corev1.PodRunning
		for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			cond := podCondition(p, t)
			ok = ok && cond.Status == corev1.ConditionTrue
			got = append(got, fmt.Sprintf("%s=%s", t, cond.Status))
		}
		return ok, fmt.Sprintf("pod %s, %v; want Running with each True", p.Status.Phase, got)
	})
}
