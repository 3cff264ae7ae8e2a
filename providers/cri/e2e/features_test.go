package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// memoryMax is the command that prints a container's memory limit, on cgroup
// v2 or v1.
var memoryMax = []string{"sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"}

// The CRI node declares the features it supports in status.declaredFeatures,
// and so the API server takes a resize of a (non-sidecar) init container, which
// it refuses from a node that has not declared InPlacePodVerticalScalingInitContainers
// ("pod update requires features ..."); the running init container gets its
// new memory limit in place.
func TestAnInitContainerIsResizedOnANodeThatDeclaresTheFeature(t *testing.T) {
	const node = "cri-e2e-features"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	expectDeclaredFeature(t, node, "InPlacePodVerticalScalingInitContainers")

	pod := busybox("initresize", node, env.Busybox, `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`)
	guaranteed := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi"), corev1.ResourceCPU: resource.MustParse("100m")}
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: guaranteed, Limits: guaranteed}
	initC := pod.Spec.Containers[0]
	initC.Name = "init"
	pod.Spec.InitContainers = []corev1.Container{initC} // never ends: the pod stays initializing
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPod(t, ns, "initresize", "its init container running", func(p *corev1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Running != nil
	})

	const patch = `{"spec":{"initContainers":[{"name":"init","resources":{"requests":{"cpu":"100m","memory":"64Mi"},"limits":{"cpu":"100m","memory":"64Mi"}}}]}}`
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "initresize", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resizing the init container: %v", err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		out, err := testenv.Exec(t, ns, "initresize", "init", memoryMax...)
		want := fmt.Sprintf("%d\n", 64<<20)
		return err == nil && out == want, fmt.Sprintf("memory limit of the init container %q, %v; want %q", out, err, want)
	})
	after := testenv.WaitPod(t, ns, "initresize", "the init container's new resources in effect", func(p *corev1.Pod) bool {
		cs := p.Status.InitContainerStatuses[0]
		mem := cs.AllocatedResources[corev1.ResourceMemory]
		return mem.String() == "64Mi"
	})
	if cs := after.Status.InitContainerStatuses[0]; cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("init container after the resize: %d restarts, state %+v; want it resized in place", cs.RestartCount, cs.State)
	}
}

// expectDeclaredFeature reports an error unless node declares feature in its
// status.declaredFeatures: the API server refuses what the feature allows to
// a node that has not declared it.
func expectDeclaredFeature(t *testing.T, node, feature string) {
	t.Helper()
	n, err := testenv.Client(t).CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Status.DeclaredFeatures, feature) {
		t.Errorf("node declares %q; want %s among them", n.Status.DeclaredFeatures, feature)
	}
}
