package cri

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Once the app containers run, a sidecar that exits (a crash, or a restart to
// resize it) restarts beside them, as on a kubelet: the pod never goes back to
// Pending nor to not Initialized.
func TestASidecarRestartingLeavesThePodInitialized(t *testing.T) {
	needRuntime(t)
	p, n := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("sidecar-restarts", sleepForever)
	pod.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"/bin/sh", "-c", "sleep 1; exit 1"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, pod, 60*time.Second, "the sidecar restarted twice", func(s *corev1.PodStatus) bool {
		return len(s.InitContainerStatuses) == 1 && s.InitContainerStatuses[0].RestartCount >= 2
	})
	n.mu.Lock()
	defer n.mu.Unlock()
	appRan := false
	for _, got := range n.pods {
		s := got.Status
		if len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil {
			appRan = true
		}
		if appRan && (s.Phase != corev1.PodRunning || condition(&s, corev1.PodInitialized) != corev1.ConditionTrue) {
			t.Errorf("once the app container ran: phase %s, Initialized %s (%s)", s.Phase, condition(&s, corev1.PodInitialized), describe(&s))
		}
	}
	if !appRan {
		t.Error("the app container never ran")
	}
}

// The app containers wait for a sidecar's startup probe to succeed, as on a
// kubelet, not only for the sidecar to run.
func TestAppContainersWaitForASidecarsStartupProbe(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("sidecar-startup", sleepForever)
	pod.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:       []string{"/bin/sh", "-c", "sleep 4; touch /tmp/started; " + sleepForever},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		StartupProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/started"}}},
			PeriodSeconds: 1, FailureThreshold: 30,
		},
	}}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	s := waitStatus(t, p, pod, 60*time.Second, "the app container running", func(s *corev1.PodStatus) bool {
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil &&
			len(s.InitContainerStatuses) == 1 && s.InitContainerStatuses[0].State.Running != nil
	})
	sidecar, app := s.InitContainerStatuses[0].State.Running.StartedAt, s.ContainerStatuses[0].State.Running.StartedAt
	if app.Sub(sidecar.Time) < 3*time.Second {
		t.Errorf("the app container started %s after the sidecar, whose startup probe passes after 4 s", app.Sub(sidecar.Time))
	}
}
