package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

// benchPod is a pod of realistic size: three containers with resources, labels,
// annotations and the tolerations admission adds.
func benchPod() *corev1.Pod {
	p := newPod("bench")
	p.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z", "prometheus.io/scrape": "true"}
	p.Labels["pod-template-hash"] = "5fc9f4bf66"
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	p.Spec.Containers = []corev1.Container{
		{Name: "app", Image: "registry.example/app:1.2.3", Resources: res},
		{Name: "sidecar", Image: "registry.example/proxy:4.5", Resources: res},
		{Name: "logs", Image: "registry.example/logs:7", Resources: res},
	}
	return p
}

// BenchmarkUpdatableEqual is the check every sync of an unchanged pod makes.
func BenchmarkUpdatableEqual(b *testing.B) {
	a, c := updatableOf(benchPod()), updatableOf(benchPod())
	b.ReportAllocs()
	for b.Loop() {
		if !a.equal(c) {
			b.Fatal("equal pods compared unequal")
		}
	}
}

// BenchmarkStatusUnchanged is the status sync of a pod whose status did not change:
// it must stop before building any JSON.
func BenchmarkStatusUnchanged(b *testing.B) {
	p := benchPod()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	same := p.Status.DeepCopy()
	b.ReportAllocs()
	for b.Loop() {
		desired := mergeStatus(p.Status, same, statusSpec{})
		if patch, _ := statuspatch.Build(p.UID, &p.Status, &desired); patch != nil {
			b.Fatal("patch for an unchanged status")
		}
	}
}
