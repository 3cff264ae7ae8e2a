package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// untilTERM runs until SIGTERM, on which it runs onTerm and exits 0.
func untilTERM(onTerm string) string {
	return fmt.Sprintf(`trap '%s; exit 0' TERM; while true; do sleep 1 & wait $!; done`, onTerm)
}

// hostDir is a hostPath volume "host" of a directory of the test's, mounted at
// /host, which the test reads after the pod is gone.
func hostDir(t *testing.T, pod *corev1.Pod, containers ...*corev1.Container) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: dir},
	}})
	for _, c := range containers {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "host", MountPath: "/host"})
	}
	return dir
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// deleteAndWait deletes the pod with opts and returns how long it took to be gone.
func deleteAndWait(t *testing.T, ns, name string, opts metav1.DeleteOptions) time.Duration {
	t.Helper()
	c := testenv.Client(t)
	start := time.Now()
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), name, opts); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err != nil, fmt.Sprintf("pod %s still there: %v", name, err)
	})
	return time.Since(start)
}

func started(p *corev1.Pod, name string) bool {
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs.Started != nil && *cs.Started && cs.State.Running != nil
		}
	}
	return false
}

// A node runs its containers' lifecycle hooks as the kubelet does: postStart
// after each start, which the container's start and the next container wait
// for, a failed one restarting the container; preStop before each stop, within
// the grace period; exec, httpGet and sleep.
func TestLifecycleHooksThroughTheAPI(t *testing.T) {
	const node = "cri-hooks"
	env := startNode(t, node)
	c := testenv.Client(t)
	ctx := context.Background()

	// A sidecar's postStart ends before the next container starts; a container
	// counts as started once its own postStart has run; preStop runs before the
	// container gets SIGTERM.
	t.Run("exec hooks", func(t *testing.T) {
		ns := testenv.Namespace(t)
		pod := busybox("exec-hooks", node, env.Busybox, `[ -f /shared/side-hooked ] && echo sidecar-hook-ran-first; `+untilTERM("echo term >> /host/order"))
		pod.Spec.InitContainers = []corev1.Container{{
			Name: "side", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Command:       []string{"/bin/sh", "-c", untilTERM("true")},
			Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
				Command: []string{"sh", "-c", "sleep 2; echo yes > /shared/side-hooked"},
			}}},
		}}
		main := &pod.Spec.Containers[0]
		main.Lifecycle = &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 3; echo main-hooked > /tmp/hooked"}}},
			PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /host/order"}}},
		}
		pod.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		for _, ctr := range []*corev1.Container{main, &pod.Spec.InitContainers[0]} {
			ctr.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
		}
		dir := hostDir(t, pod, main)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitPod(t, ns, pod.Name, "main started", func(p *corev1.Pod) bool { return started(p, "main") })
		// At once: started before its hook's 3s were over, the file would be missing.
		if out, err := testenv.Exec(t, ns, pod.Name, "main", "cat", "/tmp/hooked"); err != nil || out != "main-hooked\n" {
			t.Errorf("the postStart hook's file when main shows started = %q, %v", out, err)
		}
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			b, err := c.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
			return err == nil && string(b) == "sidecar-hook-ran-first\n", fmt.Sprintf("main's log %q, %v", b, err)
		})
		deleteAndWait(t, ns, pod.Name, metav1.DeleteOptions{})
		if got := readFile(t, filepath.Join(dir, "order")); got != "prestop\nterm\n" {
			t.Errorf("preStop and SIGTERM, in order: %q", got)
		}
	})

	// A postStart hook that fails kills the container, which restarts.
	t.Run("failing postStart", func(t *testing.T) {
		ns := testenv.Namespace(t)
		pod := busybox("failing-poststart", node, env.Busybox, `echo run >> /shared/runs; `+untilTERM("true"))
		pod.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		main := &pod.Spec.Containers[0]
		main.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
		main.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			// Fails the first time only.
			Command: []string{"sh", "-c", "[ -f /shared/failed ] && exit 0; touch /shared/failed; exit 7"},
		}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := testenv.WaitPod(t, ns, pod.Name, "restarted once, started", func(p *corev1.Pod) bool {
			return started(p, "main") && p.Status.ContainerStatuses[0].RestartCount == 1
		})
		if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil {
			t.Errorf("no last state after the failed postStart: %+v", got.Status.ContainerStatuses[0])
		}
		if out, err := testenv.Exec(t, ns, pod.Name, "main", "cat", "/shared/runs"); err != nil || out != "run\nrun\n" {
			t.Errorf("runs of main = %q, %v; want two", out, err)
		}
		deleteAndWait(t, ns, pod.Name, metav1.DeleteOptions{})
	})

	// A failed liveness probe restarts the container after its preStop hook.
	t.Run("preStop on a liveness restart", func(t *testing.T) {
		ns := testenv.Namespace(t)
		pod := busybox("liveness-prestop", node, env.Busybox, "")
		main := &pod.Spec.Containers[0]
		main.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /host/order"}}}}
		main.LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "!", "-f", "/tmp/sick"}}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		// Sick from the start; healthy once a preStop hook has run.
		main.Command = []string{"/bin/sh", "-c", "grep -q prestop /host/order 2>/dev/null || touch /tmp/sick; " + untilTERM("echo term >> /host/order")}
		dir := hostDir(t, pod, main)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitPod(t, ns, pod.Name, "restarted by its liveness probe", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 && started(p, "main")
		})
		if got := readFile(t, filepath.Join(dir, "order")); !strings.HasPrefix(got, "prestop\nterm\n") {
			t.Errorf("preStop and SIGTERM of the liveness restart, in order: %q", got)
		}
		deleteAndWait(t, ns, pod.Name, metav1.DeleteOptions{})
	})

	// httpGet hooks from the node: to a server of the test's over HTTPS, with
	// headers; by default to the pod's IP, the port by name, where a sidecar
	// serves them until the app container has stopped.
	t.Run("httpGet hooks", func(t *testing.T) {
		ns := testenv.Namespace(t)
		var mu sync.Mutex
		var hits []string
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			hits = append(hits, r.URL.RequestURI()+" "+r.Header.Get("X-Hook"))
		}))
		defer srv.Close()
		u, _ := url.Parse(srv.URL)
		port, _ := strconv.Atoi(u.Port())
		seen := func() string {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(hits, ", ")
		}
		toTest := func(path string) *corev1.LifecycleHandler {
			return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Scheme: corev1.URISchemeHTTPS, Host: "127.0.0.1", Port: intstr.FromInt32(int32(port)), Path: path,
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "yes"}},
			}}
		}
		toPod := func(query string) *corev1.LifecycleHandler {
			return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/cgi-bin/hook?" + query}}
		}

		pod := busybox("http-hooks", node, env.Busybox, untilTERM("echo main-term >> /host/hits"))
		main := &pod.Spec.Containers[0]
		main.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		main.Lifecycle = &corev1.Lifecycle{PostStart: toPod("poststart"), PreStop: toPod("prestop")}
		pod.Spec.InitContainers = []corev1.Container{{
			Name: "web", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Command: []string{"/bin/sh", "-c", `mkdir -p /var/www/cgi-bin && printf '#!/bin/sh\necho Content-Type: text/plain\necho\necho "$QUERY_STRING" >> /host/hits\n' > /var/www/cgi-bin/hook && chmod +x /var/www/cgi-bin/hook
httpd -f -p 8080 -h /var/www & ` + untilTERM("echo web-term >> /host/hits")},
			Lifecycle: &corev1.Lifecycle{
				// Serving once this returns: main, started after it, finds the server.
				PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "until wget -q -O /dev/null http://127.0.0.1:8080/; do sleep 0.1; done"}}},
				PreStop:   toTest("/prestop?c=web"),
			},
		}}
		dir := hostDir(t, pod, main, &pod.Spec.InitContainers[0])
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: "other", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:   []string{"/bin/sh", "-c", untilTERM("true")},
			Lifecycle: &corev1.Lifecycle{PostStart: toTest("/poststart?c=other")},
		})
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitPod(t, ns, pod.Name, "all started", func(p *corev1.Pod) bool {
			return started(p, "main") && started(p, "other") && p.Status.ContainerStatuses[0].RestartCount == 0
		})
		if got := seen(); got != "/poststart?c=other yes" {
			t.Errorf("the test's server got %q after the pod started", got)
		}
		if got := readFile(t, filepath.Join(dir, "hits")); got != "poststart\n" {
			t.Errorf("the pod's server got %q after the pod started", got)
		}
		deleteAndWait(t, ns, pod.Name, metav1.DeleteOptions{})
		if got := seen(); got != "/poststart?c=other yes, /prestop?c=web yes" {
			t.Errorf("the test's server got %q after the pod was deleted", got)
		}
		// The sidecar stops last: the app container's preStop finds it serving.
		if got := readFile(t, filepath.Join(dir, "hits")); got != "poststart\nprestop\nmain-term\nweb-term\n" {
			t.Errorf("the pod's server got, then the containers' SIGTERM: %q", got)
		}
	})

	// A preStop sleep delays the SIGTERM, up to the grace period. (The API's
	// pod is removed at the end of the grace period whatever the node does:
	// the container's SIGTERM, written to a file of the test's, is what tells.)
	t.Run("preStop sleep", func(t *testing.T) {
		ns := testenv.Namespace(t)
		sleeper := func(name string, seconds, grace int64) string {
			pod := busybox(name, node, env.Busybox, untilTERM("touch /host/term"))
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
			pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: seconds}}}
			dir := hostDir(t, pod, &pod.Spec.Containers[0])
			if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return dir
		}
		dirs := map[string]string{"sleep-4": sleeper("sleep-4", 4, 30), "sleep-0": sleeper("sleep-0", 0, 30), "sleep-20": sleeper("sleep-20", 20, 60)}
		for name := range dirs {
			testenv.WaitPod(t, ns, name, "started", func(p *corev1.Pod) bool { return started(p, "main") })
		}
		// termAfter deletes the pod with opts and returns when its container got SIGTERM.
		termAfter := func(name string, opts metav1.DeleteOptions) time.Duration {
			start := time.Now()
			if err := c.CoreV1().Pods(ns).Delete(ctx, name, opts); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				_, err := os.Stat(filepath.Join(dirs[name], "term"))
				return err == nil, name + ": no SIGTERM yet"
			})
			return time.Since(start)
		}
		if took := termAfter("sleep-4", metav1.DeleteOptions{}); took < 4*time.Second || took > 12*time.Second {
			t.Errorf("a container with a preStop sleep of 4s got SIGTERM after %s", took)
		}
		if took := termAfter("sleep-0", metav1.DeleteOptions{}); took > 5*time.Second {
			t.Errorf("a container with a preStop sleep of 0s got SIGTERM after %s", took)
		}
		// Deleted with a grace period of 3s, less than the sleep.
		if took := termAfter("sleep-20", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(3))}); took < 2*time.Second || took > 10*time.Second {
			t.Errorf("a container with a preStop sleep of 20s deleted with 3s of grace got SIGTERM after %s", took)
		}
	})
}
