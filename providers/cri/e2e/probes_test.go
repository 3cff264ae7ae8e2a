package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// While a pod terminates its readiness probes go on: a container that stops
// passing its probe in its grace period makes the pod unready before it is gone,
// as on a kubelet, so that Services stop sending it traffic. A liveness probe
// failing then does not restart it. A sidecar stops only after the app
// containers: its probe fails here because the app container, stopping, removes
// the file it checks.
func TestReadinessIsProbedWhileThePodTerminates(t *testing.T) {
	const node = "cri-terminating-ready"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	const loop = `while true; do sleep 1 & wait $!; done`
	const stopping = `trap 'rm -f /shared/ready /shared/live; sleep 30; exit 0' TERM; `
	shared := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	for _, name := range []string{"app", "sidecar"} {
		probed := corev1.Container{
			Name: "probed", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:        []string{"/bin/sh", "-c", "touch /shared/ready /shared/live; " + stopping + loop},
			ReadinessProbe: catProbe("/shared/ready"),
			LivenessProbe:  catProbe("/shared/live"),
			VolumeMounts:   shared,
		}
		pod := busybox(name, node, env.Busybox, stopping+loop)
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
		pod.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		pod.Spec.Containers[0].VolumeMounts = shared
		if name == "sidecar" {
			probed.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			pod.Spec.InitContainers = []corev1.Container{probed}
		} else {
			pod.Spec.Containers = []corev1.Container{probed}
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"app", "sidecar"} {
		testenv.WaitPod(t, ns, name, "Running and Ready", runningAndReady)
		if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"app", "sidecar"} {
		got := testenv.WaitPod(t, ns, name, "not Ready while terminating", func(p *corev1.Pod) bool {
			return p.DeletionTimestamp != nil && podReady(p) == corev1.ConditionFalse
		})
		if got.Status.Phase != corev1.PodRunning {
			t.Errorf("%s: phase %s while its containers stop", name, got.Status.Phase)
		}
		for _, cs := range append(got.Status.InitContainerStatuses, got.Status.ContainerStatuses...) {
			if cs.RestartCount != 0 {
				t.Errorf("%s: container %s restarted (%d) in its grace period", name, cs.Name, cs.RestartCount)
			}
		}
	}
	// The liveness probes have failed by now (the files are gone): still no restart.
	time.Sleep(3 * time.Second)
	for _, name := range []string{"app", "sidecar"} {
		got, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range append(got.Status.InitContainerStatuses, got.Status.ContainerStatuses...) {
			if cs.RestartCount != 0 || cs.State.Running == nil {
				t.Errorf("%s: container %s restarted or stopped in its grace period: %+v", name, cs.Name, cs.State)
			}
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
}

// A liveness or startup probe's own terminationGracePeriodSeconds is the grace
// period of the kill it causes, not the pod's: a container that ignores SIGTERM
// is restarted after the probe's 2 s, not the pod's 10 minutes.
func TestAProbesGracePeriodRulesItsKill(t *testing.T) {
	const node = "cri-probe-grace"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	failing := func() *corev1.Probe {
		pr := catProbe("/nonexistent")
		pr.TerminationGracePeriodSeconds = ptr.To(int64(2))
		return pr
	}
	for _, which := range []string{"liveness", "startup"} {
		pod := busybox(which, node, env.Busybox, `trap '' TERM; while true; do sleep 1; done`)
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(600))
		if which == "liveness" {
			pod.Spec.Containers[0].LivenessProbe = failing()
		} else {
			pod.Spec.Containers[0].StartupProbe = failing()
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, which := range []string{"liveness", "startup"} {
		got := testenv.WaitPod(t, ns, which, "restarted by its probe", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0
		})
		last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated
		if last == nil {
			t.Errorf("%s: no last state: %+v", which, got.Status.ContainerStatuses[0])
			continue
		}
		// Started, probed after about a second, killed 2 s later.
		if ran := last.FinishedAt.Sub(last.StartedAt.Time); ran > 15*time.Second {
			t.Errorf("%s: the container ran %s before its probe's kill took it, a 2 s grace period", which, ran)
		}
		if last.ExitCode != 137 {
			t.Errorf("%s: exit code %d, want 137 (killed once the grace period was over)", which, last.ExitCode)
		}
		// The kubelet's Events: the failure, then the kill it causes.
		probe := strings.ToUpper(which[:1]) + which[1:]
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + which})
		if err != nil {
			t.Fatal(err)
		}
		unhealthy, killing := false, false
		for _, e := range events.Items {
			if e.InvolvedObject.FieldPath != "spec.containers{main}" {
				continue
			}
			unhealthy = unhealthy || e.Reason == "Unhealthy" && e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, probe+" probe failed: ")
			killing = killing || e.Reason == "Killing" && e.Message == "Container main failed "+which+" probe, will be restarted"
		}
		if !unhealthy || !killing {
			t.Errorf("%s: Unhealthy Event %v, Killing Event %v; want both, in %+v", which, unhealthy, killing, events.Items)
		}
	}
	for _, which := range []string{"liveness", "startup"} {
		_ = c.CoreV1().Pods(ns).Delete(ctx, which, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	}
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

// An HTTP liveness probe redirected to another host passes, as on a kubelet,
// and the node records the kubelet's ProbeWarning Event on the container, with
// the answer's body: the provider's own Events reach the API.
func TestAProbeRedirectedToAnotherHostWarnsInAnEvent(t *testing.T) {
	const node = "cri-probe-warning"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().(*net.TCPAddr)

	pod := busybox("redirected", node, env.Busybox, sleepScript)
	pod.Spec.Containers[0].LivenessProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: addr.IP.String(), Port: intstr.FromInt(addr.Port), Path: "/redirect",
		}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `Liveness probe warning: Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.`
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=redirected,reason=ProbeWarning"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, want) && e.InvolvedObject.FieldPath == "spec.containers{main}" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("ProbeWarning Events %+v", events.Items)
	})
	if got := testenv.WaitPod(t, ns, "redirected", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }); got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the container restarted %d times; a redirect to another host is a pass", got.Status.ContainerStatuses[0].RestartCount)
	}
}
