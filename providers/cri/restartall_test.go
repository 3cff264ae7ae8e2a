package cri

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

// After a RestartAllContainers, a new provider on the same runtime finds the
// pod's round on its containers: the exit that triggered it, now a previous
// instance, starts no other round, and the restart counts stay.
func TestARestartOfTheProviderKeepsThePodsRound(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	ctx := context.Background()
	first, err := New(ctx, cfg, nodeName(t))
	if err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("round", "if [ -f /mnt/done ]; then exec sleep 10000; else touch /mnt/done; exit 42; fi")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	source := &pod.Spec.Containers[0]
	source.RestartPolicy, source.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyNever), restartAllRule(42)
	source.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/mnt"}}
	regular := corev1.Container{Name: "regular", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/bin/sh", "-c", sleepForever}}
	pod.Spec.Containers = append(pod.Spec.Containers, regular)
	if err := first.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	restartedOnce := func(s *corev1.PodStatus) bool {
		for _, cs := range s.ContainerStatuses {
			if cs.RestartCount != 1 || cs.State.Running == nil || cs.LastTerminationState.Terminated == nil {
				return false
			}
		}
		return s.Phase == corev1.PodRunning
	}
	before := waitStatus(t, first, pod, 60*time.Second, "both containers restarted once, running", restartedOnce)
	first.Close()

	second, _ := newProvider(t, cfg)
	waitStatus(t, second, pod, 60*time.Second, "both containers restarted once, running, after the restart", restartedOnce)
	eventually.Never(t, 2*time.Second, 100*time.Millisecond, func() (bool, string) {
		s, err := second.GetPodStatus(ctx, pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i, cs := range s.ContainerStatuses {
			if cs.ContainerID != before.ContainerStatuses[i].ContainerID || cs.RestartCount != 1 {
				return true, fmt.Sprintf("%s: %s, %d restarts; was %s, 1", cs.Name, cs.ContainerID, cs.RestartCount, before.ContainerStatuses[i].ContainerID)
			}
		}
		return false, ""
	})
}
