package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// A volume mount's subPathExpr is expanded from the container's environment,
// as on a kubelet: while a variable it uses is empty and the expansion is an
// absolute path, the container is not created (CreateContainerConfigError,
// the pod Pending); once the pod's annotation fills the variable in, it
// starts with the expanded subPath, made in the volume.
func TestASubPathExprIsExpandedAndRefusedWhileAbsolute(t *testing.T) {
	const node = "cri-subpathexpr"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("expr", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	pod.Annotations = map[string]string{"notmysubpath": "mypath"}
	pod.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "POD_NAME", Value: "foo"},
		{Name: "ANNOTATION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "work", MountPath: "/sub", SubPathExpr: "$(ANNOTATION)/$(POD_NAME)"},
		{Name: "work", MountPath: "/whole"},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "expr", "the container refused its absolute subPath", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == corev1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil &&
			cs[0].State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(cs[0].State.Waiting.Message, `"/foo"`)
	})

	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "expr", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"mysubpath":"mypath"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "expr", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if out, err := testenv.Exec(t, ns, "expr", "main", "sh", "-c", "touch /sub/x && ls /whole/mypath/foo"); err != nil || strings.TrimSpace(out) != "x" {
		t.Errorf("the subPath mypath/foo in the volume: %q, %v", out, err)
	}
}
