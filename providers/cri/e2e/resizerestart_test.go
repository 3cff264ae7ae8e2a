package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A resize of containers whose resizePolicy says RestartContainer for memory
// restarts them with the new limit, as a kubelet does (their restart count
// goes up, their last state is the instance stopped, even one that exited 0
// under restartPolicy OnFailure; a sidecar as an app container), while a
// container resizable in place in the same resize keeps running; the
// restarted containers' processes have the kubelet's oom_score_adj for their
// new memory request (the pod is burstable: a guaranteed pod's -997 is more
// than the test's containerd may set, restrict_oom_score_adj), and nothing is
// left pending.
func TestAResizeThatNeedsARestartRestartsTheContainer(t *testing.T) {
	const node = "cri-e2e-resize-restart"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	const forever = `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`
	pod := busybox("resized", node, env.Busybox, forever)
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	res := func(mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceCPU: resource.MustParse("100m")}
		return corev1.ResourceRequirements{Requests: l, Limits: l}
	}
	restartOnMemory := []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
	}
	main := pod.Spec.Containers[0]
	main.Name, main.Resources, main.ResizePolicy = "restarted", res("48Mi"), restartOnMemory
	inPlace := pod.Spec.Containers[0]
	inPlace.Name, inPlace.Resources = "inplace", res("48Mi")
	inPlace.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi"), corev1.ResourceCPU: resource.MustParse("200m")} // burstable
	sidecar := pod.Spec.Containers[0]
	sidecar.Name, sidecar.Resources, sidecar.ResizePolicy = "sidecar", res("48Mi"), restartOnMemory
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod.Spec.Containers = []corev1.Container{main, inPlace}
	pod.Spec.InitContainers = []corev1.Container{sidecar}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	before := testenv.WaitPod(t, ns, "resized", "Ready", ready)

	const patch = `{"spec":{"initContainers":[{"name":"sidecar","resources":{"requests":{"memory":"64Mi"},"limits":{"memory":"64Mi"}}}],` +
		`"containers":[{"name":"restarted","resources":{"requests":{"memory":"64Mi"},"limits":{"memory":"64Mi"}}},{"name":"inplace","resources":{"requests":{"memory":"64Mi"},"limits":{"memory":"64Mi"}}}]}}`
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "resized", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	status := func(p *corev1.Pod, name string) corev1.ContainerStatus {
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if cs.Name == name {
				return cs
			}
		}
		return corev1.ContainerStatus{}
	}
	after := testenv.WaitPod(t, ns, "resized", "Ready again, resized, with nothing pending", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		for _, name := range []string{"restarted", "inplace", "sidecar"} {
			if mem := status(p, name).AllocatedResources[corev1.ResourceMemory]; mem.String() != "64Mi" {
				return false
			}
		}
		return ready(p) && status(p, "restarted").RestartCount == 1 && status(p, "sidecar").RestartCount == 1
	})
	for _, name := range []string{"restarted", "sidecar"} {
		cs, was := status(after, name), status(before, name)
		if term := cs.LastTerminationState.Terminated; term == nil || term.ContainerID != was.ContainerID {
			t.Errorf("%s: last state %+v; want the instance stopped, %s", name, cs.LastTerminationState, was.ContainerID)
		}
	}
	if cs, was := status(after, "inplace"), status(before, "inplace"); cs.RestartCount != 0 || cs.ContainerID != was.ContainerID {
		t.Errorf("inplace: %s, %d restarts; want %s resized in place", cs.ContainerID, cs.RestartCount, was.ContainerID)
	}
	for _, name := range []string{"restarted", "inplace", "sidecar"} {
		testenv.Eventually(t, 60*time.Second, func() (bool, string) {
			out, err := testenv.Exec(t, ns, "resized", name, memoryMax...)
			want := fmt.Sprintf("%d\n", 64<<20)
			return err == nil && out == want, fmt.Sprintf("%s: memory limit %q, %v; want %q", name, out, err, want)
		})
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := n.Status.Capacity[corev1.ResourceMemory]
	want := fmt.Sprintf("%d\n", min(max(1000-1000*(64<<20)/capacity.Value(), 3), 999))
	for _, name := range []string{"restarted", "sidecar"} {
		if out, err := testenv.Exec(t, ns, "resized", name, "cat", "/proc/1/oom_score_adj"); err != nil || out != want {
			t.Errorf("%s: oom_score_adj %q, %v; want %q, that of a burstable container requesting 64Mi of %s", name, out, err, want, capacity.String())
		}
	}
}
