package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A container's own restartPolicy and its restartPolicyRules decide its
// restarts over the pod's restartPolicy, as on a kubelet; a pod whose stopped
// containers will not start again ends.
func TestContainerRestartRules(t *testing.T) {
	const node = "cri-restart-rules"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	on42 := []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	cases := []struct {
		name    string
		pod     corev1.RestartPolicy
		policy  corev1.ContainerRestartPolicy
		rules   []corev1.ContainerRestartRule
		script  string
		restart bool
	}{
		{"rule-match", corev1.RestartPolicyNever, corev1.ContainerRestartPolicyNever, on42, "exit 42", true},
		{"rule-mismatch", corev1.RestartPolicyNever, corev1.ContainerRestartPolicyNever, on42, "exit 1", false},
		{"never-over-always", corev1.RestartPolicyAlways, corev1.ContainerRestartPolicyNever, nil, "exit 1", false},
		{"always-over-never", corev1.RestartPolicyNever, corev1.ContainerRestartPolicyAlways, nil, "exit 1", true},
	}
	for _, tc := range cases {
		pod := busybox(tc.name, node, env.Busybox, tc.script)
		pod.Spec.RestartPolicy = tc.pod
		pod.Spec.Containers[0].RestartPolicy = ptr.To(tc.policy)
		pod.Spec.Containers[0].RestartPolicyRules = tc.rules
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		if tc.restart {
			got := testenv.WaitPod(t, ns, tc.name, "restarted", func(p *corev1.Pod) bool {
				return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0
			})
			if got.Status.Phase != corev1.PodRunning {
				t.Errorf("%s: phase %s while its container restarts", tc.name, got.Status.Phase)
			}
			continue
		}
		testenv.WaitPod(t, ns, tc.name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	}
	time.Sleep(2 * time.Second) // a restart, 1 s of back-off away, would be seen by now
	for _, tc := range cases {
		got, err := c.CoreV1().Pods(ns).Get(ctx, tc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := got.Status.ContainerStatuses[0].RestartCount; !tc.restart && n != 0 {
			t.Errorf("%s: restarted %d times", tc.name, n)
		}
	}
}
