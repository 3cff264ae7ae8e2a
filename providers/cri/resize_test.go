package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// A running container resized through UpdatePod gets its new memory limit and
// CPU quota at once, in its own cgroup, without a restart; a resize its
// resizePolicy says needs a restart restarts it with the new limit.
func TestARunningContainerIsResizedInPlace(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	if !provider.ResizesInPlace(p) {
		t.Fatal("the CRI provider does not say it resizes in place")
	}
	pod := busyboxPod("resized", sleepForever)
	pod.Spec.HostNetwork = true
	limits := func(mem, cpu string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	pod.Spec.Containers[0].Resources.Limits = limits("64Mi", "500m")
	pod.Spec.Containers[0].Resources.Requests = limits("64Mi", "500m")
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := waitRunningReady(t, p, pod).ContainerStatuses[0]

	grown := pod.DeepCopy()
	grown.Spec.Containers[0].Resources.Limits = limits("96Mi", "750m")
	grown.Spec.Containers[0].Resources.Requests = limits("96Mi", "750m")
	if err := p.UpdatePod(ctx, grown); err != nil {
		t.Fatal(err)
	}
	cgroup := func() (mem, cpu string) {
		mem, err := execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
		if err != nil {
			t.Fatal(err)
		}
		cpu, err = execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(mem), strings.TrimSpace(cpu)
	}
	if mem, cpu := cgroup(); mem != strconv.Itoa(96<<20) || !strings.HasPrefix(cpu, "75000") {
		t.Errorf("after the resize the container sees memory %s, cpu %s; want %d, 75000", mem, cpu, 96<<20)
	}
	eventually.Never(t, time.Second, 100*time.Millisecond, func() (bool, string) {
		st, err := p.GetPodStatus(ctx, pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		after := st.ContainerStatuses[0]
		return after.ContainerID != before.ContainerID || after.RestartCount != 0,
			fmt.Sprintf("container %s (restarts %d) after the resize, was %s: want the same, not restarted", after.ContainerID, after.RestartCount, before.ContainerID)
	})

	restart := grown.DeepCopy()
	restart.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	restart.Spec.Containers[0].Resources.Limits = limits("128Mi", "750m")
	restart.Spec.Containers[0].Resources.Requests = limits("128Mi", "750m")
	if err := p.UpdatePod(ctx, restart); err != nil {
		t.Fatalf("a resize needing a restart: %v", err)
	}
	eventually.True(t, 30*time.Second, func() (bool, string) {
		st, err := p.GetPodStatus(ctx, pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		cs := st.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil && cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ContainerID == before.ContainerID,
			fmt.Sprintf("container %s (restarts %d, state %+v, last state %+v); want a new instance after %s", cs.ContainerID, cs.RestartCount, cs.State, cs.LastTerminationState, before.ContainerID)
	})
	if mem, _ := cgroup(); mem != strconv.Itoa(128<<20) {
		t.Errorf("after the resize with a restart the container sees memory %s; want %d", mem, 128<<20)
	}
}

// A running container needs a restart for a resize when it was created with
// other requests or limits of a resource its resizePolicy marks
// RestartContainer; one created before the provider noted its resources never
// does.
func TestRestartForResize(t *testing.T) {
	res := func(mem, cpu string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceCPU: resource.MustParse(cpu)}
		return corev1.ResourceRequirements{Requests: l, Limits: l}
	}
	created := &corev1.Container{Name: "c", Resources: res("64Mi", "500m")}
	cfg := &runtimeapi.ContainerConfig{}
	recordResources(cfg, &corev1.Pod{}, created)
	cur := &runtimeapi.ContainerStatus{Annotations: cfg.Annotations}
	restartMemory := []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	cases := []struct {
		name string
		c    corev1.Container
		cur  *runtimeapi.ContainerStatus
		want bool
	}{
		{"memory changed, RestartContainer", corev1.Container{Resources: res("96Mi", "500m"), ResizePolicy: restartMemory}, cur, true},
		{"cpu changed, memory RestartContainer", corev1.Container{Resources: res("64Mi", "750m"), ResizePolicy: restartMemory}, cur, false},
		{"memory changed, NotRequired", corev1.Container{Resources: res("96Mi", "500m")}, cur, false},
		{"created before resources were noted", corev1.Container{Resources: res("96Mi", "500m"), ResizePolicy: restartMemory}, &runtimeapi.ContainerStatus{}, false},
	}
	for _, c := range cases {
		if _, got := restartForResize(&corev1.Pod{}, &c.c, c.cur); got != c.want {
			t.Errorf("%s: restart %v, want %v", c.name, got, c.want)
		}
	}

	// A container without limits of its own runs under the pod-level ones: a
	// resize of those restarts it if its resizePolicy says so.
	podLevel := func(mem string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Resources: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}}}}
	}
	bare := &corev1.Container{Name: "c", ResizePolicy: restartMemory}
	cfg = &runtimeapi.ContainerConfig{}
	recordResources(cfg, podLevel("96Mi"), bare)
	cur = &runtimeapi.ContainerStatus{Annotations: cfg.Annotations}
	if _, got := restartForResize(podLevel("128Mi"), bare, cur); !got {
		t.Error("a pod-level memory resize of a container under the pod's limit, RestartContainer: no restart")
	}
	if _, got := restartForResize(podLevel("96Mi"), bare, cur); got {
		t.Error("the same pod-level limit: a restart")
	}
}

// A pod with pod-level resources runs bounded by them: its own cgroup has the
// pod's limits, a container without limits of its own sees the pod's in its
// cgroup, and a resize of the pod-level resources through UpdatePod changes
// both in place.
func TestPodLevelLimitsBindThePodAndItsContainers(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("podlevel", sleepForever)
	pod.Spec.HostNetwork = true
	podLevel := func(mem, cpu string) *corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceCPU: resource.MustParse(cpu)}
		return &corev1.ResourceRequirements{Limits: l, Requests: l}
	}
	pod.Spec.Resources = podLevel("96Mi", "300m")
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	inContainer := func() (mem, cpu string) {
		mem, err := execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
		if err != nil {
			t.Fatal(err)
		}
		cpu, err = execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(mem), strings.TrimSpace(cpu)
	}
	ofPod := func() (mem, cpu string) {
		read := func(paths ...string) string {
			for _, path := range paths {
				if b, err := os.ReadFile(path); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
			t.Fatalf("none of %v can be read", paths)
			return ""
		}
		dir := cgroupParent(pod)
		return read(filepath.Join(cgroupRoot, dir, "memory.max"), filepath.Join(cgroupRoot, "memory", dir, "memory.limit_in_bytes")),
			read(filepath.Join(cgroupRoot, dir, "cpu.max"), filepath.Join(cgroupRoot, "cpu", dir, "cpu.cfs_quota_us"))
	}
	check := func(when string, mem int, quota string) {
		t.Helper()
		if m, c := inContainer(); m != strconv.Itoa(mem) || !strings.HasPrefix(c, quota) {
			t.Errorf("%s the container sees memory %s, cpu %s; want %d, %s", when, m, c, mem, quota)
		}
		if m, c := ofPod(); m != strconv.Itoa(mem) || !strings.HasPrefix(c, quota) {
			t.Errorf("%s the pod's cgroup has memory %s, cpu %s; want %d, %s", when, m, c, mem, quota)
		}
	}
	check("at the start", 96<<20, "30000")

	grown := pod.DeepCopy()
	grown.Spec.Resources = podLevel("128Mi", "500m")
	if err := p.UpdatePod(ctx, grown); err != nil {
		t.Fatal(err)
	}
	check("after growing", 128<<20, "50000")

	shrunk := grown.DeepCopy()
	shrunk.Spec.Resources = podLevel("112Mi", "200m")
	if err := p.UpdatePod(ctx, shrunk); err != nil {
		t.Fatal(err)
	}
	check("after shrinking", 112<<20, "20000")
}

// A CPU resize that restarts the container (resizePolicy RestartContainer)
// brings the pod's cgroup along, up and down: the kernel refuses a container's
// CPU quota above its pod's and a pod's below a running container's, so the
// pod's quota follows the resize when the restarted container starts.
func TestARestartingCPUResizeBringsThePodsCgroupAlong(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("cpurestart", sleepForever)
	pod.Spec.HostNetwork = true
	limits := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")},
		}
	}
	pod.Spec.Containers[0].Resources = limits("200m")
	pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer}}
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	podQuota := func() string {
		for _, path := range []string{filepath.Join(cgroupRoot, cgroupParent(pod), "cpu.max"), filepath.Join(cgroupRoot, "cpu", cgroupParent(pod), "cpu.cfs_quota_us")} {
			if b, err := os.ReadFile(path); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return ""
	}
	for i, step := range []struct{ cpu, quota string }{{"400m", "40000"}, {"100m", "10000"}} {
		next := pod.DeepCopy()
		next.Spec.Containers[0].Resources = limits(step.cpu)
		if err := p.UpdatePod(ctx, next); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 30*time.Second, func() (bool, string) {
			st, err := p.GetPodStatus(ctx, pod.Namespace, pod.Name)
			if err != nil {
				t.Fatal(err)
			}
			cs := st.ContainerStatuses[0]
			return int(cs.RestartCount) == i+1 && cs.State.Running != nil && strings.HasPrefix(podQuota(), step.quota),
				fmt.Sprintf("to %s: restarts %d, state %+v, waiting %+v, the pod's quota %q; want %d restarts, running, quota %s", step.cpu, cs.RestartCount, cs.State.Running, cs.State.Waiting, podQuota(), i+1, step.quota)
		})
		pod = next
	}
}
