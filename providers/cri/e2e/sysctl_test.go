package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A pod's sysctls are set in its sandbox, as on a kubelet, named with dots or
// with slashes; a pod with a sysctl the kubelet does not deem safe is rejected
// as the kubelet rejects it: Failed, reason SysctlForbidden.
func TestThePodsSysctlsAreSet(t *testing.T) {
	const node = "cri-sysctls"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	for name, sysctl := range map[string]string{"dots": "kernel.shm_rmid_forced", "slashes": "kernel/shm_rmid_forced"} {
		pod := busybox(name, node, env.Busybox, "cat /proc/sys/kernel/shm_rmid_forced")
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: sysctl, Value: "1"}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unsafe := busybox("unsafe", node, env.Busybox, "true")
	unsafe.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "10000000000"}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, unsafe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dots", "slashes"} {
		testenv.WaitPod(t, ns, name, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			b, err := c.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return err == nil && string(b) == "1\n", fmt.Sprintf("%s: kernel.shm_rmid_forced is %q (%v), want 1", name, b, err)
		})
	}
	got := testenv.WaitPod(t, ns, "unsafe", "rejected", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed
	})
	if got.Status.Reason != "SysctlForbidden" || got.Status.Message != `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted` || len(got.Status.ContainerStatuses) != 0 {
		t.Errorf("a pod with an unsafe sysctl: %s %s %q, containers %+v; want Failed, SysctlForbidden, as the kubelet rejects it", got.Status.Phase, got.Status.Reason, got.Status.Message, got.Status.ContainerStatuses)
	}
}
