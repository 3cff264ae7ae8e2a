package fault_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// TestPodsStartedAgainAfterTheProviderLostThemCountARestart stops a node whose
// in-process mock holds its pods' only record, so the pods are gone with it, and
// starts the node again: the pods (restartPolicy Always) are started again, and
// the API tells it as the kubelet would — the pod keeps its start time, each
// container counts one restart and shows the lost instance as its last state.
func TestPodsStartedAgainAfterTheProviderLostThemCountARestart(t *testing.T) {
	const node = "vk-lost"
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx := context.Background()
	_, stop := startNode(t, node)

	before := map[string]*corev1.Pod{}
	for i := range 3 {
		name := fmt.Sprintf("web-%d", i)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		before[name], _ = waitRunning(t, c, ns, name, time.Now(), time.Minute)
	}
	stop()
	// Start times are kept to the second: let the second instance start in a later one.
	time.Sleep(1100 * time.Millisecond)
	p, _ := startNode(t, node)

	for name, old := range before {
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.CreateCount(pod.UID) != 1 || len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Running == nil {
				return false, fmt.Sprintf("%s not running again in the new provider: %+v", name, pod.Status.ContainerStatuses)
			}
			cs := pod.Status.ContainerStatuses[0]
			if cs.RestartCount != 1 {
				return false, fmt.Sprintf("%s: restartCount %d, want 1", name, cs.RestartCount)
			}
			last := cs.LastTerminationState.Terminated
			oldStart := old.Status.ContainerStatuses[0].State.Running.StartedAt
			if last == nil || last.Reason != "ContainerStatusUnknown" || !last.StartedAt.Equal(&oldStart) {
				return false, fmt.Sprintf("%s: lastState %+v, want the first instance (started %v), terminated", name, cs.LastTerminationState, oldStart)
			}
			if !pod.Status.StartTime.Equal(old.Status.StartTime) {
				return false, fmt.Sprintf("%s: startTime %v, want the first %v", name, pod.Status.StartTime, old.Status.StartTime)
			}
			return true, ""
		})
	}
}
