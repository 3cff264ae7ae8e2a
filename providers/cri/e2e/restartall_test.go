package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A container that exits with a code whose restartPolicyRules action is
// RestartAllContainers restarts the whole pod in place, as on a kubelet: every
// init, sidecar and app container that ran is started again (its restart count
// up, its last state the instance before), from the init containers on, once,
// whichever kind of container exited; an app container that never ran (the
// init container exited) just starts; the pod then runs on. The node declares RestartAllContainersOnContainerExits,
// and the pod reports the condition AllContainersRestarting.
func TestRestartAllContainersRestartsThePodInPlace(t *testing.T) {
	const node = "cri-e2e-restart-all"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	expectDeclaredFeature(t, node, "RestartAllContainersOnContainerExits")

	on42 := []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	ctr := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/bin/sh", "-c", script},
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/mnt"}}}
	}
	newPod := func(name string, init []corev1.Container, app ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To(int64(2)),
				InitContainers: init, Containers: app,
				Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			},
		}
	}
	const sleep = "sleep 10000"
	sidecar := ctr("sidecar", sleep)
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)

	// An app container's exit restarts all.
	source := ctr("source", "if [ -f /mnt/done ]; then exec sleep 10000; else touch /mnt/done; exit 42; fi")
	source.RestartPolicy, source.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyNever), on42
	// An init container's exit restarts the init containers and sidecars.
	sourceInit := ctr("source-init", "if [ -f /mnt/done ]; then exit 0; else touch /mnt/done; exit 42; fi")
	sourceInit.RestartPolicy, sourceInit.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyNever), on42
	// A sidecar's exit restarts all, the app containers too.
	sourceSidecar := ctr("source-sidecar", "if [ -f /mnt/done ]; then exec sleep 10000; else touch /mnt/done; sleep 2; exit 42; fi")
	sourceSidecar.RestartPolicy, sourceSidecar.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyAlways), on42
	// A container restarted once by its own policy (exit 1) restarts all
	// when it exits 42 the next time.
	again := ctr("source", "if [ -f /mnt/done ]; then exec sleep 10000; elif [ -f /mnt/once ]; then touch /mnt/done; exit 42; else touch /mnt/once; exit 1; fi")
	again.RestartPolicy, again.RestartPolicyRules = ptr.To(corev1.ContainerRestartPolicyAlways), on42
	pods := []struct {
		pod      *corev1.Pod
		restarts map[string]int32
	}{
		{newPod("app-exit", []corev1.Container{ctr("init", "exit 0"), sidecar}, source, ctr("regular", sleep)), map[string]int32{"init": 1, "sidecar": 1, "source": 1, "regular": 1}},
		{newPod("init-exit", []corev1.Container{sidecar, ctr("init", "exit 0"), sourceInit}, ctr("regular", sleep)), map[string]int32{"sidecar": 1, "init": 1, "source-init": 1, "regular": 0}},
		{newPod("sidecar-exit", []corev1.Container{ctr("init", "exit 0"), sidecar, sourceSidecar}, ctr("regular", sleep)), map[string]int32{"init": 1, "sidecar": 1, "source-sidecar": 1, "regular": 1}},
		{newPod("second-exit", nil, again, ctr("regular", sleep)), map[string]int32{"source": 2, "regular": 1}},
	}
	for _, tc := range pods {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range pods {
		got := testenv.WaitPod(t, ns, tc.pod.Name, "every container restarted once, and the pod running", func(p *corev1.Pod) bool {
			statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
			for _, cs := range statuses {
				if n := tc.restarts[cs.Name]; cs.RestartCount != n || (n > 0 && cs.LastTerminationState.Terminated == nil) {
					return false
				}
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running == nil {
					return false
				}
			}
			return p.Status.Phase == corev1.PodRunning
		})
		var cond *corev1.PodCondition
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == corev1.AllContainersRestarting {
				cond = &got.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionFalse {
			t.Errorf("%s: condition AllContainersRestarting %+v once restarted; want it False", tc.pod.Name, cond)
		}
	}
}
