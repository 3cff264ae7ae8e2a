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

// The downward API's status.podIP and status.podIPs reach a container's
// environment, as they do on a kubelet, though the pod had no IP when the node
// resolved its environment; a variable referring to them sees the IP too.
func TestThePodsIPReachesTheEnvironment(t *testing.T) {
	const node = "cri-env-podip"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("podip", node, env.Busybox, `echo "ip=$POD_IP ips=$POD_IPS url=$URL"`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
		{Name: "URL", Value: "http://$(POD_IP):8080/"},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := testenv.WaitPod(t, ns, "podip", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	ip := got.Status.PodIP
	if ip == "" {
		t.Fatal("no pod IP in the status")
	}
	want := fmt.Sprintf("ip=%s ips=%s url=http://%s:8080/\n", ip, ip, ip)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		b, err := c.CoreV1().Pods(ns).GetLogs("podip", &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && string(b) == want, fmt.Sprintf("logs %q, want %q (%v)", b, want, err)
	})
}
