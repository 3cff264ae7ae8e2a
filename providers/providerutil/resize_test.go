package providerutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestAResizeIsRefusedByAProviderThatCannotMakeIt(t *testing.T) {
	pod := func(initCPU, appCPU, image string) *corev1.Pod {
		req := func(cpu string) corev1.ResourceRequirements {
			return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
		}
		return &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Resources: req(initCPU)}},
			Containers:     []corev1.Container{{Name: "app", Image: image, Resources: req(appCPU)}},
		}}
	}
	running := pod("100m", "200m", "a")
	if err := RefuseResize("slurm", running, pod("100m", "0.2", "b")); err != nil {
		t.Errorf("an image change and the same quantity written otherwise: %v, want nil", err)
	}
	err := RefuseResize("slurm", running, pod("100m", "300m", "a"))
	if !errdefs.IsInvalidInput(err) || err.Error() != "slurm cannot resize a pod it has taken on (the resources of container app changed)" {
		t.Errorf("a resize: %v, want InvalidInput naming container app", err)
	}
	if r := ResizedContainers(running, pod("150m", "300m", "a")); len(r) != 2 || r[0].Container.Name != "setup" ||
		r[0].Before.Requests.Cpu().String() != "100m" || r[1].Container.Name != "app" {
		t.Errorf("ResizedContainers = %+v, want setup then app with their resources before", r)
	}
	podLevel := pod("100m", "200m", "a")
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	err = RefuseResize("slurm", running, podLevel)
	if !errdefs.IsInvalidInput(err) || err.Error() != "slurm cannot resize a pod it has taken on (the pod-level resources changed)" {
		t.Errorf("a pod-level resize: %v, want InvalidInput naming the pod-level resources", err)
	}
}
