package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// containersOnly is the mock reporting its pods' phase and containers, and no
// condition nor start time, like a provider that only knows its containers.
type containersOnly struct{ *mock.Provider }

func (p containersOnly) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	s, err := p.Provider.GetPodStatus(ctx, ns, name)
	if s != nil {
		s = s.DeepCopy()
		s.Conditions, s.StartTime = nil, nil
	}
	return s, err
}

func (p containersOnly) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	p.Provider.NotifyPods(ctx, func(pod *corev1.Pod) {
		pod = pod.DeepCopy()
		pod.Status.Conditions, pod.Status.StartTime = nil, nil
		notify(pod)
	})
}

// A provider that reports only its containers still gets the pod the
// conditions the kubelet works out from them, so that waiting for Ready works,
// and a start time, from which an active deadline counts.
func TestWhatAProviderLeavesOutIsWorkedOutAsTheKubeletDoes(t *testing.T) {
	c, node := startController(t, containersOnly{newMock(t, "")})
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
		return ok && p.Status.StartTime != nil, fmt.Sprintf("pod %s since %v, %v; want Running with each True and a start time",
			p.Status.Phase, p.Status.StartTime, got)
	})
	createPod(t, c, ns, node, appPod("limited", func(s *corev1.PodSpec) { s.ActiveDeadlineSeconds = ptr.To[int64](2) }))
	testenv.WaitPod(t, ns, "limited", "Failed (DeadlineExceeded)", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == pod.ReasonDeadlineExceeded
	})
}
