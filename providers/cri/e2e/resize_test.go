package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// `kubectl patch --subresource resize` on a running pod of a CRI node: the API
// server accepts it (the node reports the containers' resources, as a kubelet
// does), the running container gets its new memory limit and CPU quota without
// a restart, and its status says they are in effect, with nothing pending.
func TestAPodIsResizedInPlaceThroughTheAPI(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.InPlaceResize)
	const node = "cri-e2e-resize"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	pod := busybox("resized", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	guaranteed := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi"), corev1.ResourceCPU: resource.MustParse("200m")}
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: guaranteed, Limits: guaranteed}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := testenv.WaitPod(t, ns, "resized", "Running with its resources reported", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Resources != nil
	})

	const patch = `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"300m","memory":"64Mi"},"limits":{"cpu":"300m","memory":"64Mi"}}}]}}`
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "resized", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	check := func(want string, cmd ...string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() (bool, string) {
			out, err := testenv.Exec(t, ns, "resized", "main", cmd...)
			return err == nil && out == want, fmt.Sprintf("%v = %q, %v; want %q", cmd, out, err, want)
		})
	}
	check(fmt.Sprintf("%d\n", 64<<20), "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
	check("30000\n", "sh", "-c", "cut -d' ' -f1 /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	after := testenv.WaitPod(t, ns, "resized", "the new resources in effect", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		mem := cs.AllocatedResources[corev1.ResourceMemory]
		return cs.Resources != nil && cs.Resources.Limits.Cpu().String() == "300m" && mem.String() == "64Mi"
	})
	for _, cond := range after.Status.Conditions {
		if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
			t.Errorf("condition %s %s (%s) after the resize", cond.Type, cond.Status, cond.Message)
		}
	}
	if b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != 0 {
		t.Errorf("container %s, %d restarts after the resize; was %s: want it resized in place", a.ContainerID, a.RestartCount, b.ContainerID)
	}
}

// A resize of a pod's pod-level resources through the API, on a CRI node that
// declares the feature: the container without limits of its own runs under the
// new pod-level memory limit, restarted because its resizePolicy says a memory
// resize needs it (as a kubelet restarts it), and the pod's status reports the
// pod-level resources in effect.
func TestPodLevelResourcesAreResizedThroughTheAPI(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.PodLevelResourcesStatus)
	const node = "cri-e2e-podlevel"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	pod := busybox("whole", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	podLevel := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("200m")}
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: podLevel, Limits: podLevel}
	pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "whole", "Running with its pod-level resources reported", func(p *corev1.Pod) bool {
		mem := p.Status.AllocatedResources[corev1.ResourceMemory]
		return p.Status.Phase == corev1.PodRunning && mem.String() == "64Mi" && p.Status.Resources != nil
	})
	memLimit := func(want string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() (bool, string) {
			out, err := testenv.Exec(t, ns, "whole", "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
			return err == nil && out == want, fmt.Sprintf("the container's memory limit %q, %v; want %q", out, err, want)
		})
	}
	memLimit(fmt.Sprintf("%d\n", 64<<20))

	const patch = `{"spec":{"resources":{"requests":{"memory":"96Mi"},"limits":{"memory":"96Mi"}}}}`
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "whole", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	after := testenv.WaitPod(t, ns, "whole", "the pod-level resize in effect, the container restarted", func(p *corev1.Pod) bool {
		mem := p.Status.AllocatedResources[corev1.ResourceMemory]
		return mem.String() == "96Mi" && p.Status.Resources != nil && p.Status.Resources.Limits.Memory().String() == "96Mi" &&
			len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	memLimit(fmt.Sprintf("%d\n", 96<<20))
	for _, cond := range after.Status.Conditions {
		if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
			t.Errorf("condition %s %s (%s) after the resize", cond.Type, cond.Status, cond.Message)
		}
	}
}

// A resize that would lower the pod's memory limit below the memory its
// cgroup holds is not made, as on a kubelet: the pod reports
// PodResizeInProgress, reason Error, saying so, and keeps its limit; a resize
// back to what runs ends the condition.
func TestAMemoryLimitIsNotLoweredBelowTheUsage(t *testing.T) {
	const node = "cri-e2e-below-usage"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	pod := busybox("used", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	podLevel := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: podLevel, Limits: podLevel}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "used", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.Resources != nil })
	resize := func(mem string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"memory":%q},"limits":{"memory":%q}}}}`, mem, mem)
		if _, err := c.CoreV1().Pods(ns).Patch(ctx, "used", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatal(err)
		}
	}
	resize("10Ki")
	failing := regexp.MustCompile(`memory limit \(10240\) below current usage \(\d+\)`)
	testenv.WaitPod(t, ns, "used", "PodResizeInProgress, reason Error", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizeInProgress && cond.Reason == corev1.PodReasonError && failing.MatchString(cond.Message) {
				return p.Status.Resources.Limits.Memory().String() == "64Mi"
			}
		}
		return false
	})
	out, err := testenv.Exec(t, ns, "used", "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
	if want := fmt.Sprintf("%d\n", 64<<20); err != nil || out != want {
		t.Errorf("the container's memory limit %q, %v; want %q, unchanged", out, err, want)
	}
	resize("64Mi")
	testenv.WaitPod(t, ns, "used", "the condition gone once the spec is back to what runs", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizeInProgress || cond.Type == corev1.PodResizePending {
				return false
			}
		}
		return p.Status.ContainerStatuses[0].RestartCount == 0 && p.Status.ContainerStatuses[0].State.Running != nil
	})
}
