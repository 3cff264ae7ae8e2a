package cri

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestMemoryVolumeSizeIsTheKubeletsDefault(t *testing.T) {
	mi := func(n int64) int64 { return n << 20 }
	withLimit := func(c corev1.Container, mem string) corev1.Container {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}
		return c
	}
	app := func(mem string) corev1.Container { return withLimit(corev1.Container{Name: "app"}, mem) }
	init := func(mem string, sidecar bool) corev1.Container {
		c := withLimit(corev1.Container{Name: "init"}, mem)
		if sidecar {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		return c
	}
	node := mi(1024)
	cases := []struct {
		name      string
		inits     []corev1.Container
		apps      []corev1.Container
		sizeLimit string
		node      int64
		want      int64
	}{
		{name: "the node's memory", apps: []corev1.Container{{Name: "app"}}, node: node, want: node},
		{name: "the sizeLimit", apps: []corev1.Container{{Name: "app"}}, sizeLimit: "64Mi", node: node, want: mi(64)},
		{name: "a sizeLimit over the node's memory", apps: []corev1.Container{{Name: "app"}}, sizeLimit: "2Gi", node: node, want: node},
		{name: "the pod's limit: the sum of its containers'", apps: []corev1.Container{app("100Mi"), app("28Mi")}, node: node, want: mi(128)},
		{name: "no pod limit when a container has none", apps: []corev1.Container{app("100Mi"), {Name: "free"}}, node: node, want: node},
		{name: "a sizeLimit under the pod's limit", apps: []corev1.Container{app("100Mi")}, sizeLimit: "10Mi", node: node, want: mi(10)},
		{name: "a sizeLimit over the pod's limit", apps: []corev1.Container{app("100Mi")}, sizeLimit: "200Mi", node: node, want: mi(100)},
		{name: "an init container that needs more", inits: []corev1.Container{init("300Mi", false)}, apps: []corev1.Container{app("100Mi")}, node: node, want: mi(300)},
		{name: "sidecars run with the app containers", inits: []corev1.Container{init("50Mi", true)}, apps: []corev1.Container{app("100Mi")}, node: node, want: mi(150)},
		{name: "the kernel's default without the node's memory", apps: []corev1.Container{{Name: "app"}}, want: 0},
	}
	for _, c := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: c.inits, Containers: c.apps}}
		ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
		if c.sizeLimit != "" {
			ed.SizeLimit = ptr.To(resource.MustParse(c.sizeLimit))
		}
		if got := memoryVolumeSize(pod, ed, c.node); got != c.want {
			t.Errorf("%s: size %d, want %d", c.name, got, c.want)
		}
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{`/a/b`: "/a/b", `/a\040b`: "/a b", `/a\134b`: `/a\b`, `/a\0`: `/a\0`} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Against containerd: a memory-backed emptyDir is a tmpfs of its sizeLimit (or of
// the pod's memory limit), which refuses more; both are unmounted, and the pod's
// directory removed, when the pod is deleted.
func TestMemoryEmptyDirIsATmpfs(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	p, _ := newProvider(t, cfg)
	ctx := context.Background()
	pod := busyboxPod("mem", sleepForever)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "small", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("8Mi"))}}},
		{Name: "pod", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "small", MountPath: "/small"}, {Name: "pod", MountPath: "/pod"}}
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	mounts, err := execOut(t, p, pod, "main", "cat", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for dir, size := range map[string]string{"/small": "size=8192k", "/pod": "size=65536k"} {
		var line string
		for _, l := range strings.Split(mounts, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
				line = l
			}
		}
		if !strings.HasPrefix(line, "tmpfs ") || !strings.Contains(line, size) {
			t.Errorf("%s is mounted as %q, want a tmpfs with %s", dir, line, size)
		}
	}
	if out, err := execOut(t, p, pod, "main", "sh", "-c", "dd if=/dev/zero of=/small/f bs=1M count=9 2>&1"); err == nil {
		t.Errorf("9 MiB fit in an 8 MiB emptyDir: %s", out)
	}
	if _, err := execOut(t, p, pod, "main", "sh", "-c", "test -w /small && test -w /pod"); err != nil {
		t.Errorf("the emptyDirs are not writable: %v", err)
	}

	dir := p.podDir(pod.UID)
	if m, _ := mountPointsUnder(dir); len(m) != 2 {
		t.Errorf("mounts under the pod's directory: %q, want the two tmpfs", m)
	}
	pod.DeletionGracePeriodSeconds = ptr.To(int64(0))
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitGone(t, p, pod)
	waitFor(t, 10*time.Second, "the pod's directory removed", func() (bool, string) {
		m, _ := mountPointsUnder(dir)
		_, err := os.Stat(dir)
		return len(m) == 0 && os.IsNotExist(err), strings.Join(m, " ")
	})
}

// A subPath of an emptyDir that does not exist yet is made with the volume's
// own mode, so that the pod's fsGroup and every user that may write in the
// volume may write in it, as on a kubelet.
func TestASubPathOfAnEmptyDirHasTheVolumesMode(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("subpath", sleepForever)
	pod.Spec.HostNetwork = true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(123))}
	pod.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "v", MountPath: "/whole"},
		{Name: "v", MountPath: "/sub", SubPath: "test-sub"},
	}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	out, err := execOut(t, p, pod, "main", "stat", "-c", "%A %g", "/whole", "/sub")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out)
	// drwxrwsrwt: a tmpfs's sticky root, the fsGroup's setgid bit.
	if len(lines) != 4 || lines[0] != "drwxrwsrwt" || lines[2] != lines[0] || lines[1] != "123" || lines[3] != "123" {
		t.Errorf("stat of the volume and of its subPath: %q; want both drwxrwsrwt, group 123", out)
	}
}
