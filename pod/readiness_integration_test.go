package pod_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A pod with a readiness gate is Ready only once the gate's condition, written
// by another controller, is True, as on a kubelet: Ready follows the gate both
// ways while the containers stay ready.
func TestAReadinessGateHoldsReadyBack(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	const gate = "example.com/load-balancer"
	createPod(t, c, ns, node, appPod("gated", func(s *corev1.PodSpec) {
		s.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	}))

	waitReady := func(want corev1.ConditionStatus, reason string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			p := getPod(t, c, ns, "gated")
			ready, containers := podCondition(p, corev1.PodReady), podCondition(p, corev1.ContainersReady)
			return p.Status.Phase == corev1.PodRunning && ready.Status == want && ready.Reason == reason &&
					containers.Status == corev1.ConditionTrue,
				fmt.Sprintf("pod is %s, Ready %s (%s: %s), ContainersReady %s; want Running, Ready %s (%s)",
					p.Status.Phase, ready.Status, ready.Reason, ready.Message, containers.Status, want, reason)
		})
	}
	waitReady(corev1.ConditionFalse, "ReadinessGatesNotReady")

	setGate(t, c, ns, "gated", gate, corev1.ConditionTrue)
	waitReady(corev1.ConditionTrue, "")
	setGate(t, c, ns, "gated", gate, corev1.ConditionFalse)
	waitReady(corev1.ConditionFalse, "ReadinessGatesNotReady")

	// Settled: the node's checks of the pod write nothing more.
	rv := getPod(t, c, ns, "gated").ResourceVersion
	time.Sleep(2 * time.Second) // four of the controller's status polls
	if p := getPod(t, c, ns, "gated"); p.ResourceVersion != rv {
		t.Errorf("the pod was written again once settled: resourceVersion %s → %s, conditions %+v", rv, p.ResourceVersion, p.Status.Conditions)
	}
}

// setGate writes the gate's condition as a load balancer's controller does:
// a strategic-merge patch of the status subresource, merged by type.
func setGate(t *testing.T, c kubernetes.Interface, ns, name, gate string, s corev1.ConditionStatus) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{
		{Type: corev1.PodConditionType(gate), Status: s, LastTransitionTime: metav1.Now()}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.PodCondition{}
}
