package cri

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/provider"
)

// A busybox pod on a CNI network runs, is Ready, and serves its logs, exec and a
// port-forward to the httpd it runs; its stats are reported.
func TestPodRunsWithLogsExecPortForwardAndStats(t *testing.T) {
	needRuntime(t)
	p, notes := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("web", `echo hello-stdout; echo hello-stderr >&2; httpd -p 8080 -h /var/www; `+sleepForever)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GREETING", Value: "hi there"}}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	st := waitRunningReady(t, p, pod)
	if st.PodIP == "" || st.PodIP == st.HostIP {
		t.Errorf("podIP = %q (hostIP %q), want an address of the CNI network", st.PodIP, st.HostIP)
	}
	cs := st.ContainerStatuses[0]
	if !strings.HasPrefix(cs.ContainerID, containerIDPrefix) || cs.ImageID == "" || cs.State.Running == nil || !*cs.Started {
		t.Errorf("container status = %+v", cs)
	}
	if notes.count() == 0 {
		t.Error("NotifyPods callback never called")
	}
	// CreatePod again with the same UID changes nothing.
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatalf("second CreatePod: %v", err)
	}
	if n := len(sandboxes(t)); n != 1 {
		t.Errorf("%d sandboxes, want 1", n)
	}

	t.Run("logs", func(t *testing.T) {
		var logs string
		waitFor(t, 10*time.Second, "both lines in the log", func() (bool, string) {
			rc, err := p.GetContainerLogs(ctx, "default", "web", "main", provider.ContainerLogOpts{})
			if err != nil {
				return false, err.Error()
			}
			logs = readAll(t, rc)
			return strings.Contains(logs, "hello-stdout\n") && strings.Contains(logs, "hello-stderr\n"), logs
		})
		rc, err := p.GetContainerLogs(ctx, "default", "web", "main", provider.ContainerLogOpts{Tail: 1, TailSet: true, Timestamps: true})
		if err != nil {
			t.Fatal(err)
		}
		tail := readAll(t, rc)
		ts, rest, _ := strings.Cut(tail, " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || strings.Count(tail, "\n") != 1 || !strings.HasPrefix(rest, "hello-") {
			t.Errorf("tail=1 with timestamps = %q", tail)
		}
		rc, _ = p.GetContainerLogs(ctx, "default", "web", "main", provider.ContainerLogOpts{LimitBytes: 5})
		if got := readAll(t, rc); got != "hello" {
			t.Errorf("limitBytes=5 = %q", got)
		}
		future := time.Now().Add(time.Hour)
		rc, _ = p.GetContainerLogs(ctx, "default", "web", "main", provider.ContainerLogOpts{SinceTime: &future})
		if got := readAll(t, rc); got != "" {
			t.Errorf("sinceTime in the future = %q", got)
		}

		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rc, err = p.GetContainerLogs(fctx, "default", "web", "main", provider.ContainerLogOpts{Follow: true, TailSet: true, Tail: 0})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if _, err := execOut(t, p, pod, "main", "sh", "-c", "echo followed-line > /proc/1/fd/1"); err != nil {
			t.Fatalf("exec: %v", err)
		}
		line, err := bufio.NewReader(rc).ReadString('\n')
		if err != nil || line != "followed-line\n" {
			t.Errorf("followed log read %q, %v", line, err)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out, err := execOut(t, p, pod, "main", "sh", "-c", `echo "$GREETING"; exit 7`)
		var ee *provider.ExecError
		if !errors.As(err, &ee) || ee.ExitCode != 7 {
			t.Errorf("exec error = %v, want exit code 7", err)
		}
		if out != "hi there\n" {
			t.Errorf("exec stdout = %q, want the env value", out)
		}
		a := newAttachIO("from-stdin")
		if err := p.RunInContainer(ctx, "default", "web", "main", []string{"cat"}, a); err != nil || a.stdout.String() != "from-stdin" {
			t.Errorf("exec cat with stdin = %q, %v", a.stdout.String(), err)
		}
	})

	t.Run("attach", func(t *testing.T) {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		a := newAttachIO("")
		done := make(chan error, 1)
		go func() { done <- p.AttachToContainer(actx, "default", "web", "main", a) }()
		waitFor(t, 10*time.Second, "output through attach", func() (bool, string) {
			if _, err := execOut(t, p, pod, "main", "sh", "-c", "echo attached-line > /proc/1/fd/1"); err != nil {
				return false, err.Error()
			}
			return strings.Contains(a.stdout.String(), "attached-line\n"), a.stdout.String()
		})
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("AttachToContainer did not return when its context ended")
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		client, server := net.Pipe()
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			err := p.PortForward(fctx, "default", "web", 8080, server)
			server.Close() // the caller closes the stream: here, once httpd has answered
			done <- err
		}()
		if _, err := io.WriteString(client, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(client)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), "200 OK") || !strings.Contains(string(body), "hello from busybox") {
			t.Errorf("response through port-forward = %q", body)
		}
		if err := <-done; err != nil {
			t.Errorf("PortForward: %v", err)
		}
	})

	t.Run("stats", func(t *testing.T) {
		sum, err := p.GetStatsSummary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(sum.Pods) != 1 || sum.Pods[0].PodRef.Name != "web" || len(sum.Pods[0].Containers) != 1 ||
			sum.Pods[0].Memory.WorkingSetBytes == nil || *sum.Pods[0].Memory.WorkingSetBytes == 0 {
			t.Errorf("summary pods = %+v", sum.Pods)
		}
		if *sum.Node.Memory.WorkingSetBytes == 0 || *sum.Node.CPU.UsageCoreNanoSeconds == 0 {
			t.Errorf("node stats = %+v", sum.Node)
		}
		fams, err := p.GetMetricsResource(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, f := range fams {
			names[f.GetName()] = true
		}
		for _, n := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "pod_memory_working_set_bytes", "node_cpu_usage_seconds_total"} {
			if !names[n] {
				t.Errorf("metric family %s missing (have %v)", n, names)
			}
		}
	})
}

// A container that exits 3 under restartPolicy Never leaves the pod Failed with
// exit code 3.
func TestExitCodeWithRestartNeverFailsPod(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("exit3", "exit 3")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.HostNetwork = true
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, pod, 60*time.Second, "Failed", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	term := st.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" || st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("container status = %s", describe(st))
	}
	if st.PodIP != st.HostIP {
		t.Errorf("host-network pod: podIP %q, hostIP %q", st.PodIP, st.HostIP)
	}
}

// Under restartPolicy Always a crashing container restarts, with a growing back-off
// (CrashLoopBackOff while it waits), and its previous instance's log stays readable.
func TestRestartAlwaysBacksOff(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	p, _ := newProvider(t, cfg)
	pod := busyboxPod("crash", "echo run-$(date +%s%N); exit 1")
	pod.Spec.HostNetwork = true
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	sawBackOff := false
	restartedAt := map[int32]time.Time{}
	waitFor(t, 60*time.Second, "restart count 4", func() (bool, string) {
		st, err := p.GetPodStatus(context.Background(), "default", "crash")
		if err != nil {
			return false, err.Error()
		}
		cs := st.ContainerStatuses[0]
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = true
			if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
				t.Errorf("in back-off, lastState = %+v", cs.LastTerminationState)
			}
		}
		if _, ok := restartedAt[cs.RestartCount]; !ok {
			restartedAt[cs.RestartCount] = time.Now()
		}
		if st.Phase != corev1.PodRunning && cs.RestartCount > 0 {
			t.Errorf("phase %s while crash-looping, want Running", st.Phase)
		}
		return cs.RestartCount >= 4, describe(st)
	})
	if !sawBackOff {
		t.Error("never saw CrashLoopBackOff")
	}
	// Back-offs of 200ms, 400ms, 800ms between restarts 1 and 4: at least 1.2s.
	if d := restartedAt[4].Sub(restartedAt[1]); d < time.Second {
		t.Errorf("restarts 1 to 4 took %s: no back-off", d)
	}
	rc, err := p.GetContainerLogs(context.Background(), "default", "crash", "main", provider.ContainerLogOpts{Previous: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rc); !strings.HasPrefix(got, "run-") {
		t.Errorf("previous log = %q", got)
	}
}

// A failing readiness probe keeps the pod NotReady; once it passes the pod is Ready.
// A failing liveness probe (httpGet) restarts the container; tcpSocket readiness works.
func TestProbes(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()

	t.Run("readiness", func(t *testing.T) {
		pod := busyboxPod("unready", sleepForever)
		pod.Spec.HostNetwork = true
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/ready"}}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p, pod, 60*time.Second, "Running", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
		// Three probe periods: never Ready.
		eventually.Never(t, 3*time.Second, 100*time.Millisecond, func() (bool, string) {
			st, _ := p.GetPodStatus(ctx, "default", "unready")
			return condition(st, corev1.PodReady) != corev1.ConditionFalse || condition(st, corev1.ContainersReady) != corev1.ConditionFalse || st.ContainerStatuses[0].Ready,
				"pod became ready with a failing readiness probe: " + describe(st)
		})
		if _, err := execOut(t, p, pod, "main", "touch", "/tmp/ready"); err != nil {
			t.Fatal(err)
		}
		waitRunningReady(t, p, pod)
	})

	t.Run("liveness", func(t *testing.T) {
		port := freePort(t)
		pod := busyboxPod("unlive", "httpd -p "+strconv.Itoa(port)+" -h /var/www; "+sleepForever)
		pod.Spec.HostNetwork = true
		pod.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/missing", Port: intstr.FromInt32(int32(port))}},
			PeriodSeconds: 1, FailureThreshold: 3,
		}
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
			PeriodSeconds: 1,
		}
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		waitRunningReady(t, p, pod)
		waitStatus(t, p, pod, 60*time.Second, "a restart for liveness", func(s *corev1.PodStatus) bool {
			return s.ContainerStatuses[0].RestartCount >= 1
		})
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A resolved pod: init containers run in order before the app container, sharing an
// emptyDir that a non-root user may write to; env from the resolution reaches the process; a configMap volume's file
// appears and follows UpdatePodVolumes.
func TestResolvedPodVolumesEnvAndInitContainers(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("resolved", sleepForever)
	pod.Spec.HostNetwork = true
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	scratch := []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "first", Image: env.Busybox, Command: []string{"sh", "-c", "echo -n 1 >> /scratch/order"}, VolumeMounts: scratch},
		{Name: "second", Image: env.Busybox, Command: []string{"sh", "-c", "echo -n 2 >> /scratch/order"}, VolumeMounts: scratch},
		// A user other than root writes to the emptyDir too, as on a kubelet.
		{Name: "third", Image: env.Busybox, Command: []string{"sh", "-c", "echo -n 3 > /scratch/by-nobody"}, VolumeMounts: scratch,
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(65534))}},
	}
	pod.Spec.Containers[0].VolumeMounts = append(scratch, corev1.VolumeMount{Name: "config", MountPath: "/etc/config"})
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "token"}}}}
	rp := &provider.ResolvedPod{
		Pod: pod,
		Env: map[string][]corev1.EnvVar{"main": {{Name: "TOKEN", Value: "from-a-secret"}}},
		Volumes: map[string]*provider.VolumeContents{"config": {Files: []provider.VolumeFile{
			{Path: "greeting", Data: []byte("hello"), Mode: 0o644},
			{Path: "nested/dir/file", Data: []byte("deep"), Mode: 0o600},
		}}},
	}
	if err := p.CreateResolvedPod(ctx, rp); err != nil {
		t.Fatal(err)
	}
	st := waitRunningReady(t, p, pod)
	for _, ic := range st.InitContainerStatuses {
		if ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 0 || ic.State.Terminated.Reason != "Completed" {
			t.Errorf("init container %s: %+v", ic.Name, ic.State)
		}
	}
	if condition(st, corev1.PodInitialized) != corev1.ConditionTrue {
		t.Errorf("Initialized = %s", condition(st, corev1.PodInitialized))
	}
	check := func(want string, cmd ...string) {
		t.Helper()
		out, err := execOut(t, p, pod, "main", cmd...)
		if err != nil || out != want {
			t.Errorf("%v = %q, %v; want %q", cmd, out, err, want)
		}
	}
	check("12", "cat", "/scratch/order")
	check("3", "cat", "/scratch/by-nobody")
	check("from-a-secret\n", "sh", "-c", "echo $TOKEN")
	check("hello", "cat", "/etc/config/greeting")
	check("deep", "cat", "/etc/config/nested/dir/file")
	if _, err := execOut(t, p, pod, "main", "sh", "-c", "echo x > /etc/config/new"); err == nil {
		t.Error("configMap volume is writable")
	}

	rp.Volumes = map[string]*provider.VolumeContents{"config": {Files: []provider.VolumeFile{{Path: "greeting", Data: []byte("goodbye"), Mode: 0o644}}}}
	if err := p.UpdatePodVolumes(ctx, rp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the new file content", func() (bool, string) {
		out, err := execOut(t, p, pod, "main", "cat", "/etc/config/greeting")
		return err == nil && out == "goodbye", out
	})
	check("gone\n", "sh", "-c", "test -e /etc/config/nested || echo gone")
}

// A pod's fsGroup owns its volumes, as on a kubelet: a Secret's file of mode 0400
// becomes readable by the group and belongs to it, the emptyDir is the group's
// with setgid (what a container writes there is the group's), and the
// containers' processes, run as a user of their own, have the group.
func TestTheFSGroupOwnsThePodsVolumes(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("fsgroup", sleepForever)
	pod.Spec.HostNetwork = true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000)), FSGroup: ptr.To(int64(2000))}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: ptr.To(int32(0o400))}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "secret", MountPath: "/etc/secret"}, {Name: "scratch", MountPath: "/scratch"}}
	rp := &provider.ResolvedPod{Pod: pod, Volumes: map[string]*provider.VolumeContents{"secret": {Files: []provider.VolumeFile{
		{Path: "key", Data: []byte("s3cret"), Mode: 0o400},
	}}}}
	if err := p.CreateResolvedPod(ctx, rp); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	for _, c := range []struct {
		want string
		cmd  []string
	}{
		{"s3cret", []string{"cat", "/etc/secret/key"}},
		{"2000 440\n", []string{"stat", "-L", "-c", "%g %a", "/etc/secret/key"}},
		{"2000 2777\n", []string{"stat", "-c", "%g %a", "/scratch"}},
		{"2000\n", []string{"sh", "-c", "touch /scratch/f && stat -c %g /scratch/f"}},
		{"yes\n", []string{"sh", "-c", "id -G | tr ' ' '\\n' | grep -qx 2000 && echo yes"}},
	} {
		out, err := execOut(t, p, pod, "main", c.cmd...)
		if err != nil || out != c.want {
			t.Errorf("%v = %q, %v; want %q", c.cmd, out, err, c.want)
		}
	}
}

// Resources and the security context reach the container: its memory cgroup limit,
// CPU quota, user and read-only root filesystem.
func TestResourcesAndSecurityContext(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("limited", sleepForever)
	pod.Spec.HostNetwork = true
	c := &pod.Spec.Containers[0]
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")}
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(65534)), ReadOnlyRootFilesystem: ptr.To(true)}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	out, err := execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
	if err != nil || strings.TrimSpace(out) != strconv.Itoa(64<<20) {
		t.Errorf("memory limit seen in the container = %q, %v; want %d", out, err, 64<<20)
	}
	out, err = execOut(t, p, pod, "main", "sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "50000") {
		t.Errorf("cpu quota seen in the container = %q, %v; want 50000", out, err)
	}
	out, err = execOut(t, p, pod, "main", "id", "-u")
	if err != nil || out != "65534\n" {
		t.Errorf("id -u = %q, %v", out, err)
	}
	if _, err := execOut(t, p, pod, "main", "touch", "/file"); err == nil {
		t.Error("wrote to a read-only root filesystem")
	}
	privileged := busyboxPod("privileged", sleepForever)
	privileged.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	if err := p.CreatePod(context.Background(), privileged); err == nil {
		t.Error("privileged pod accepted though the config does not allow it")
	}
}

// DeletePod stops the containers within the grace period (SIGKILL after it, for a
// process that ignores SIGTERM) and removes the sandbox.
func TestDeleteWithinGracePeriodRemovesSandbox(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("stubborn", `trap '' TERM; while true; do sleep 1; done`)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	if n := len(sandboxes(t)); n != 1 {
		t.Fatalf("%d sandboxes before delete", n)
	}
	start := time.Now()
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitGone(t, p, pod)
	took := time.Since(start)
	if took < 1500*time.Millisecond || took > 10*time.Second {
		t.Errorf("delete took %s, want about the 2s grace period", took)
	}
	if n := len(sandboxes(t)); n != 0 {
		t.Errorf("%d sandboxes left after delete", n)
	}
	if n := len(containers(t)); n != 0 {
		t.Errorf("%d containers left after delete", n)
	}
	if err := p.DeletePod(ctx, pod); !errorsIsNotFound(err) {
		t.Errorf("second DeletePod = %v, want NotFound", err)
	}
}

// A new provider process on the same runtime and root directory finds the pods of
// its node again: same sandbox and container, nothing duplicated or orphaned.
func TestRestartFindsSandboxes(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	ctx := context.Background()
	first, err := New(ctx, cfg, nodeName(t))
	if err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("survivor", sleepForever)
	if err := first.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := waitRunningReady(t, first, pod)
	first.Close()

	second, _ := newProvider(t, cfg)
	pods, err := second.GetPods(ctx)
	if err != nil || len(pods) != 1 || pods[0].UID != pod.UID {
		t.Fatalf("GetPods after restart = %v, %v", pods, err)
	}
	after := waitRunningReady(t, second, pod)
	if after.ContainerStatuses[0].ContainerID != before.ContainerStatuses[0].ContainerID || after.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("container after restart = %+v, before %+v", after.ContainerStatuses[0], before.ContainerStatuses[0])
	}
	if err := second.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n, m := len(sandboxes(t)), len(containers(t)); n != 1 || m != 1 {
		t.Errorf("%d sandboxes and %d containers after restart and re-create, want 1 and 1", n, m)
	}
}

// A container created but not started when the node process died (killed between
// CreateContainer and StartContainer) is started by the next process, as the same
// container and without a restart. Before, the pod stayed in ContainerCreating.
func TestAContainerCreatedButNotStartedBeforeARestartIsStarted(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	ctx := context.Background()
	first, err := New(ctx, cfg, nodeName(t))
	if err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("half-started", sleepForever)
	if err := first.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := waitRunningReady(t, first, pod)
	first.Close()

	// Put the runtime where a crash would have left it: the pod's container
	// created and never started.
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	old := strings.TrimPrefix(before.ContainerStatuses[0].ContainerID, "containerd://")
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: old}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: old}); err != nil {
		t.Fatal(err)
	}
	ccfg, err := first.containerConfig(pod, &pod.Spec.Containers[0], nil, 0, before.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	sbcfg, _, err := first.sandboxConfig(pod)
	if err != nil {
		t.Fatal(err)
	}
	sbs := sandboxes(t)
	if len(sbs) != 1 {
		t.Fatalf("%d sandboxes", len(sbs))
	}
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sbs[0].Id, Config: ccfg, SandboxConfig: sbcfg})
	if err != nil {
		t.Fatal(err)
	}

	second, _ := newProvider(t, cfg)
	after := waitRunningReady(t, second, pod)
	if got := after.ContainerStatuses[0]; got.ContainerID != "containerd://"+created.ContainerId || got.RestartCount != 0 {
		t.Errorf("after the restart: container %s with %d restarts, want the created one %s with none", got.ContainerID, got.RestartCount, created.ContainerId)
	}
}

// Images of a private repository pull with the pod's credentials, and not without.
func TestPullSecrets(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	anon := busyboxPod("anonymous", sleepForever)
	anon.Spec.HostNetwork = true
	anon.Spec.Containers[0].Image = env.PrivateBusybox
	anon.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways // even if an earlier test pulled it
	if err := p.CreatePod(ctx, anon); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, anon, 60*time.Second, "a pull error", func(s *corev1.PodStatus) bool {
		w := s.ContainerStatuses[0].State.Waiting
		return w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff")
	})

	authed := busyboxPod("authed", sleepForever)
	authed.Spec.HostNetwork = true
	authed.Spec.Containers[0].Image = env.PrivateBusybox
	authed.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	if err := p.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: authed, PullCredentials: []provider.RegistryCredential{
		{Registry: "http://" + env.Registry, Username: crienv.PrivateUser, Password: crienv.PrivatePassword},
	}}); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, authed)
}

// UpdatePod with a new image restarts the container with it; labels are kept.
func TestUpdatePodImageRestartsContainer(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("updated", sleepForever)
	pod.Spec.HostNetwork = true
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := waitRunningReady(t, p, pod)
	pod = pod.DeepCopy()
	pod.Spec.Containers[0].Image = env.Busybox2
	pod.Labels = map[string]string{"version": "2"}
	if err := p.UpdatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, pod, 30*time.Second, "running the new image", func(s *corev1.PodStatus) bool {
		cs := s.ContainerStatuses[0]
		return cs.Image == env.Busybox2 && cs.State.Running != nil && cs.ContainerID != before.ContainerStatuses[0].ContainerID
	})
	if st.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("restart count = %d, want 1", st.ContainerStatuses[0].RestartCount)
	}
	got, err := p.GetPod(ctx, "default", "updated")
	if err != nil || got.Labels["version"] != "2" {
		t.Errorf("GetPod after update = %v, %v", got.Labels, err)
	}
}

// A pod past its activeDeadlineSeconds is stopped and Failed with DeadlineExceeded.
func TestActiveDeadlineFailsPod(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("deadline", sleepForever)
	pod.Spec.HostNetwork = true
	pod.Spec.ActiveDeadlineSeconds = ptr.To(int64(2))
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, pod, 30*time.Second, "Failed", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if st.Reason != "DeadlineExceeded" || st.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("status = %s reason %q", describe(st), st.Reason)
	}
}

// A sandbox stopped behind the provider's back is replaced and the pod runs again,
// as on a kubelet: the init container runs again, the app container's restart count
// goes on (1), its last state is the instance of the dead sandbox, whose output
// `logs --previous` still serves; the dead sandbox is removed once no instance of
// it is current or previous any more (here, when the pod is deleted).
func TestDeadSandboxIsRecreated(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("phoenix", `echo "run $(cat /proc/sys/kernel/random/uuid)"; `+sleepForever)
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: env.Busybox, Command: []string{"sh", "-c", "echo init"}}}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	old := sandboxes(t)
	if len(old) != 1 {
		t.Fatalf("%d sandboxes", len(old))
	}
	// A running container may not have written its line yet.
	var before string
	waitFor(t, 30*time.Second, "main's first line", func() (bool, string) {
		before = logsOf(t, p, pod, "main", provider.ContainerLogOpts{})
		return strings.HasPrefix(before, "run "), fmt.Sprintf("logs %q", before)
	})
	stopBehindTheProvidersBack(t, old[0].Id)
	var st *corev1.PodStatus
	waitFor(t, 60*time.Second, "a new sandbox, running, with the restart counted", func() (bool, string) {
		ready := 0
		for _, sb := range sandboxes(t) {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY && sb.Id != old[0].Id {
				ready++
			}
		}
		st, _ = p.GetPodStatus(context.Background(), "default", "phoenix")
		ok := ready == 1 && st.Phase == corev1.PodRunning && condition(st, corev1.PodReady) == corev1.ConditionTrue &&
			len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].RestartCount == 1
		return ok, fmt.Sprintf("%d new ready sandboxes; %s", ready, describe(st))
	})
	main := st.ContainerStatuses[0]
	if main.LastTerminationState.Terminated == nil {
		t.Errorf("main's last state = %+v, want the terminated instance of the dead sandbox", main.LastTerminationState)
	}
	if init := st.InitContainerStatuses[0]; init.RestartCount != 1 || init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
		t.Errorf("init container = restarts %d, state %+v; want it run again in the new sandbox", init.RestartCount, init.State)
	}
	previous := logsOf(t, p, pod, "main", provider.ContainerLogOpts{Previous: true})
	var current string
	waitFor(t, 30*time.Second, "the new instance's first line", func() (bool, string) {
		current = logsOf(t, p, pod, "main", provider.ContainerLogOpts{})
		return current != "", fmt.Sprintf("logs %q", current)
	})
	if previous != before || current == before || !strings.HasPrefix(current, "run ") {
		t.Errorf("logs before %q, --previous %q, now %q: want --previous to be the dead sandbox's", before, previous, current)
	}
	if err := p.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "no sandbox left", func() (bool, string) {
		sbs := sandboxes(t)
		return len(sbs) == 0, fmt.Sprintf("%d sandboxes", len(sbs))
	})
}

// A pod with restartPolicy Never whose sandbox dies gets no new one: it ends
// Failed, with its container's end, as on a kubelet.
func TestDeadSandboxEndsANeverPod(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("once", sleepForever)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	old := sandboxes(t)
	stopBehindTheProvidersBack(t, old[0].Id)
	st := waitStatus(t, p, pod, 30*time.Second, "Failed", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if cs := st.ContainerStatuses[0]; cs.State.Terminated == nil || cs.RestartCount != 0 {
		t.Errorf("container = %+v", cs)
	}
	if sbs := sandboxes(t); len(sbs) != 1 || sbs[0].Id != old[0].Id {
		t.Errorf("%d sandboxes, want only the dead one", len(sbs))
	}
}

// stopBehindTheProvidersBack stops a sandbox as a crash or an operator would.
func stopBehindTheProvidersBack(t *testing.T, sandbox string) {
	t.Helper()
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandbox}); err != nil {
		t.Fatal(err)
	}
}

// A pod whose sandbox was removed behind the provider's back (crictl rmp)
// stops at once when deleted: the runtime's "not found" is the stop the node
// waits for, not a failure to retry for good.
func TestAPodWhoseSandboxIsGoneIsDeleted(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("vanished", sleepForever)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever // no new sandbox once it is gone
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	old := sandboxes(t)
	stopBehindTheProvidersBack(t, old[0].Id)
	waitStatus(t, p, pod, 2*time.Minute, "Failed", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	waitFor(t, time.Minute, "the sandbox removed behind the provider's back", func() (bool, string) {
		// As crictl rmp: stopped (again: the network's teardown may have
		// failed the first time), then removed.
		if _, err := rt.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: old[0].Id}); err != nil {
			return false, err.Error()
		}
		_, err := rt.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: old[0].Id})
		return err == nil, fmt.Sprint(err)
	})
	if err := p.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the pod gone from the provider", func() (bool, string) {
		st, err := p.GetPodStatus(context.Background(), pod.Namespace, pod.Name)
		if err != nil {
			return errdefs.IsNotFound(err), err.Error()
		}
		return false, describe(st)
	})
}

// A process left in a deleted pod's cgroup, that the runtime does not know of
// (as containerd loses a task whose start was cut short), is killed once the
// sandbox is stopped, as the kubelet kills what is left in a pod's cgroup:
// otherwise it runs on, and the sandbox's removal can fail for good.
func TestAStrayInADeletedPodsCgroupIsKilled(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	pod := busyboxPod("strays", sleepForever)
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitRunningReady(t, p, pod)
	stray := exec.Command("sleep", "1000")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stray.Process.Kill() })
	ended := make(chan error, 1)
	go func() { ended <- stray.Wait() }()
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	moved := 0
	for _, root := range append(roots, "/sys/fs/cgroup") {
		procs := filepath.Join(root, cgroupParent(pod), "cgroup.procs")
		if _, err := os.Stat(procs); err != nil {
			continue
		}
		if err := os.WriteFile(procs, []byte(strconv.Itoa(stray.Process.Pid)), 0o644); err != nil {
			t.Fatalf("moving the stray into %s: %v", procs, err)
		}
		moved++
	}
	if moved == 0 {
		t.Fatal("the pod has no cgroup to put the stray in")
	}
	if err := p.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the pod gone from the provider", func() (bool, string) {
		_, err := p.GetPodStatus(context.Background(), pod.Namespace, pod.Name)
		return errdefs.IsNotFound(err), fmt.Sprint(err)
	})
	select {
	case err := <-ended:
		t.Logf("the stray ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the stray in the deleted pod's cgroup still runs")
	}
}

// logsOf reads a container's log through the provider.
func logsOf(t *testing.T, p *Provider, pod *corev1.Pod, container string, opts provider.ContainerLogOpts) string {
	t.Helper()
	rc, err := p.GetContainerLogs(context.Background(), pod.Namespace, pod.Name, container, opts)
	if err != nil {
		t.Fatalf("logs %s (%+v): %v", container, opts, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The node gets the host's CPUs and memory, the configured pods limit and the
// runtime's version; Ping succeeds while the runtime is ready.
func TestNodeCapacityAndPing(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	cfg.Pods = "42"
	p, _ := newProvider(t, cfg)
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.9"}}}}
	p.ConfigureNode(context.Background(), node)
	capacity := node.Status.Capacity
	if cpu := capacity[corev1.ResourceCPU]; cpu.Value() != int64(goruntime.NumCPU()) {
		t.Errorf("cpu = %s", cpu.String())
	}
	if mem := capacity[corev1.ResourceMemory]; mem.Value() < 1<<30 {
		t.Errorf("memory = %s", mem.String())
	}
	if pods := node.Status.Allocatable[corev1.ResourcePods]; pods.Value() != 42 {
		t.Errorf("allocatable pods = %s", pods.String())
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://") {
		t.Errorf("containerRuntimeVersion = %q", v)
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	pod := busyboxPod("hostip", sleepForever)
	pod.Spec.HostNetwork = true
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if st := waitRunningReady(t, p, pod); st.HostIP != "127.0.0.9" || st.PodIP != "127.0.0.9" {
		t.Errorf("hostIP %q podIP %q, want the node's InternalIP", st.HostIP, st.PodIP)
	}
}
