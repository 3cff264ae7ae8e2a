package cri

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func limited(cpuReq, cpuLim, memLim string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if cpuReq != "" {
		r.Requests[corev1.ResourceCPU] = resource.MustParse(cpuReq)
	}
	if cpuLim != "" {
		r.Limits[corev1.ResourceCPU] = resource.MustParse(cpuLim)
	}
	if memLim != "" {
		r.Limits[corev1.ResourceMemory] = resource.MustParse(memLim)
		r.Requests[corev1.ResourceMemory] = resource.MustParse(memLim)
	}
	return r
}

func TestThePodCgroupGetsThePodsLimitsAsTheKubeletGivesThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want podCgroupLimits
	}{{
		name: "best effort: the least shares, no limits",
		spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
		want: podCgroupLimits{shares: 2, quota: -1, memory: -1},
	}, {
		name: "every container limited: the sums",
		spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "a", Resources: limited("100m", "200m", "64Mi")},
			{Name: "b", Resources: limited("150m", "300m", "32Mi")},
		}},
		want: podCgroupLimits{shares: 256, quota: 50000, memory: 96 << 20},
	}, {
		name: "one container unlimited: shares only",
		spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "a", Resources: limited("100m", "200m", "64Mi")},
			{Name: "b", Resources: limited("150m", "", "")},
		}},
		want: podCgroupLimits{shares: 256, quota: -1, memory: -1},
	}, {
		name: "an init container overlaps the app containers: the larger",
		spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "i", Resources: limited("500m", "1", "256Mi")}},
			Containers:     []corev1.Container{{Name: "a", Resources: limited("100m", "200m", "64Mi")}},
		},
		want: podCgroupLimits{shares: 512, quota: 100000, memory: 256 << 20},
	}, {
		name: "pod-level resources rule, containers unlimited",
		spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90m"), corev1.ResourceMemory: resource.MustParse("105Mi")}},
			Containers: []corev1.Container{{Name: "a"}},
		},
		want: podCgroupLimits{shares: 51, quota: 9000, memory: 105 << 20},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podCgroupLimitsOf(&corev1.Pod{Spec: tc.spec}); got != tc.want {
				t.Errorf("podCgroupLimitsOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestThePodCgroupIsWrittenOnV1AndV2(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: limited("250m", "500m", "64Mi")}}}}
	pod.UID = "u1"
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	v1 := t.TempDir()
	for _, ctrl := range []string{"cpu", "memory"} {
		if err := os.MkdirAll(filepath.Join(v1, ctrl, cgroupParent(pod)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := applyPodCgroup(v1, pod); err != nil {
		t.Fatal(err)
	}
	dir := func(ctrl string) string { return filepath.Join(v1, ctrl, cgroupParent(pod)) }
	if s, q, m := read(filepath.Join(dir("cpu"), "cpu.shares")), read(filepath.Join(dir("cpu"), "cpu.cfs_quota_us")), read(filepath.Join(dir("memory"), "memory.limit_in_bytes")); s != "256" || q != "50000" || m != "67108864" {
		t.Errorf("v1: shares %s quota %s memory %s", s, q, m)
	}

	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu memory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(v2, cgroupParent(pod)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := applyPodCgroup(v2, pod); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(v2, cgroupParent(pod))
	if w, c, m := read(filepath.Join(d, "cpu.weight")), read(filepath.Join(d, "cpu.max")), read(filepath.Join(d, "memory.max")); w != "10" || c != "50000 100000" || m != "67108864" {
		t.Errorf("v2: weight %s cpu.max %s memory.max %s", w, c, m)
	}

	// No cgroup of the pod's (another cgroup driver): nothing written, no error.
	if err := applyPodCgroup(t.TempDir(), pod); err != nil {
		t.Errorf("without the pod's cgroup: %v", err)
	}
}
