// Package e2e runs the CRI provider behind a whole virtual node (internal/process/agent) on a
// real control plane and a private containerd: what a kubectl user sees.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// startNode starts a private containerd and a virtual node with the CRI provider on
// it, with edits to the node's configuration, until the test ends.
func startNode(t *testing.T, name string, edits ...func(*agent.Config)) *crienv.Env {
	t.Helper()
	testenv.ControlPlane(t) // skips under -short
	testenv.Require(t, crienv.Available())
	env, err := crienv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	cfg := nodetest.CRIConfig(t, name, env)
	for _, edit := range edits {
		edit(&cfg)
	}
	nodetest.Run(t, cfg)
	return env
}

func busybox(name, node, image, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(2)),
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

// A pod bound to the node runs as real containers and its status reaches the API;
// its logs, exec and port-forward are served through the API server; deleting it stops it within its grace
// period and removes the sandbox; a pod exiting 3 under Never ends Failed.
func TestPodThroughTheAPI(t *testing.T) {
	const node = "cri-e2e"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("web", node, env.Busybox, `echo hello-from-cri; httpd -p 8080 -h /var/www; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := testenv.WaitPod(t, ns, "web", "Running and Ready", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return p.Status.Phase == corev1.PodRunning
			}
		}
		return false
	})
	if id := got.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Errorf("containerID = %q", id)
	}

	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		b, err := c.CoreV1().Pods(ns).GetLogs("web", &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && string(b) == "hello-from-cri\n", fmt.Sprintf("logs %q, %v", b, err)
	})

	if out, err := testenv.Exec(t, ns, "web", "main", "sh", "-c", "echo exec-$((6*7))"); err != nil || out != "exec-42\n" {
		t.Errorf("exec through the API = %q, %v", out, err)
	}

	// kubectl port-forward to the httpd of the pod
	local, stopForwarding := testenv.PortForward(t, ns, "web", 8080)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", local))
	if err != nil {
		t.Errorf("GET through port-forward: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "hello from busybox\n" {
			t.Errorf("GET through port-forward = %d %q", resp.StatusCode, body)
		}
	}
	stopForwarding()

	start := time.Now()
	if err := c.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		return err != nil, fmt.Sprintf("pod still there: %v", err)
	})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("deletion took %s with a 2s grace period", took)
	}
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The pod leaves the API once its grace period is over; its sandbox goes
	// as soon as the runtime has stopped it (the kubelet too removes sandboxes
	// after the pod), which on a loaded machine may take longer than the 2 s.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		sbs, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err == nil && len(sbs.Items) == 0, fmt.Sprintf("sandboxes after delete: %v, %v", sbs, err)
	})

	failing := busybox("exit3", node, env.Busybox, "exit 3")
	failing.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := c.CoreV1().Pods(ns).Create(ctx, failing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = testenv.WaitPod(t, ns, "exit3", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 {
		t.Errorf("container state = %+v", got.Status.ContainerStatuses[0].State)
	}
}

// A ConfigMap volume's file appears in the container and changes when the ConfigMap
// changes; env from a Secret is visible to the process; the memory limit is the
// container's cgroup limit.
func TestConfigMapSecretAndLimitsThroughTheAPI(t *testing.T) {
	const node = "cri-e2e-config"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"token": "s3cret-token"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busybox("configured", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}},
	}}}
	mc := &pod.Spec.Containers[0]
	mc.VolumeMounts = []corev1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}}
	mc.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token",
	}}}}
	mc.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "configured", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	check := func(want string, cmd ...string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() (bool, string) {
			out, err := testenv.Exec(t, ns, "configured", "main", cmd...)
			return err == nil && out == want, fmt.Sprintf("%v = %q, %v; want %q", cmd, out, err, want)
		})
	}
	check("s3cret-token\n", "sh", "-c", "echo $TOKEN")
	check("hello", "cat", "/etc/settings/greeting")
	check(fmt.Sprintf("%d\n", 48<<20), "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")

	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "changed"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("changed", "cat", "/etc/settings/greeting")
}
