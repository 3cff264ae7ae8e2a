package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// sleepScript runs until SIGTERM.
const sleepScript = `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`

func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func catProbe(path string) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", path}}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
}

// A sidecar's readiness probe is applied, and the pod's readiness waits for it as
// for an app container's: while the sidecar's probe fails the pod is Running but
// not Ready, with the sidecar named; once it passes the pod is Ready.
func TestASidecarsReadinessProbeHoldsThePodsReadiness(t *testing.T) {
	const node = "cri-sidecar-ready"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("sidecar", node, env.Busybox, sleepScript)
	pod.Spec.InitContainers = []corev1.Container{{
		Name: "proxy", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:        []string{"/bin/sh", "-c", sleepScript},
		RestartPolicy:  ptr.To(corev1.ContainerRestartPolicyAlways),
		ReadinessProbe: catProbe("/tmp/ready"),
	}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := testenv.WaitPod(t, ns, "sidecar", "main ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	})
	// The main container is ready; the sidecar's probe has had time to fail.
	time.Sleep(3 * time.Second)
	got, err := c.CoreV1().Pods(ns).Get(ctx, "sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podReady(got) != corev1.ConditionFalse || got.Status.InitContainerStatuses[0].Ready {
		t.Fatalf("a sidecar failing its readiness probe: pod Ready %s, sidecar ready %v", podReady(got), got.Status.InitContainerStatuses[0].Ready)
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type == corev1.ContainersReady && cond.Message != "containers with unready status: [proxy]" {
			t.Errorf("ContainersReady message %q", cond.Message)
		}
	}
	if _, err := testenv.Exec(t, ns, "sidecar", "proxy", "touch", "/tmp/ready"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "sidecar", "Ready once the sidecar's probe passes", func(p *corev1.Pod) bool {
		return podReady(p) == corev1.ConditionTrue && p.Status.InitContainerStatuses[0].Ready
	})
}

// Init containers that completed are reported as the kubelet reports them:
// terminated with exit code 0 and Ready, the pod Initialized.
func TestCompletedInitContainersAreReady(t *testing.T) {
	const node = "cri-init-ready"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("init", node, env.Busybox, sleepScript)
	for _, name := range []string{"init1", "init2"} {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
			Name: name, Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/bin/true"},
		})
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := testenv.WaitPod(t, ns, "init", "Running and Ready", runningAndReady)
	for _, cond := range got.Status.Conditions {
		if cond.Type == corev1.PodInitialized && cond.Status != corev1.ConditionTrue {
			t.Errorf("Initialized %s", cond.Status)
		}
	}
	if len(got.Status.InitContainerStatuses) != 2 {
		t.Fatalf("init container statuses %+v", got.Status.InitContainerStatuses)
	}
	for _, cs := range got.Status.InitContainerStatuses {
		if term := cs.State.Terminated; !cs.Ready || term == nil || term.ExitCode != 0 {
			t.Errorf("init container %s: ready %v, state %s", cs.Name, cs.Ready, fmt.Sprintf("%+v", cs.State))
		}
	}
}
