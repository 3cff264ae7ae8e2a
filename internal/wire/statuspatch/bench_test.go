package statuspatch

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkStatusPatch builds the patch of a pod of three containers going from
// Pending to Running.
func BenchmarkStatusPatch(b *testing.B) { benchmarkStatusPatch(b, Build) }

// BenchmarkStatusPatchReference is the same with the generic strategic-merge diff
// Build replaced, for comparison.
func BenchmarkStatusPatchReference(b *testing.B) { benchmarkStatusPatch(b, referenceStatusPatch) }

func benchmarkStatusPatch(b *testing.B, patchOf func(types.UID, *corev1.PodStatus, *corev1.PodStatus) ([]byte, error)) {
	pending := corev1.PodStatus{Phase: corev1.PodPending}
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	running := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7", HostIP: "10.0.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
	for _, c := range []struct{ name, image string }{
		{"app", "registry.example/app:1.2.3"}, {"sidecar", "registry.example/proxy:4.5"}, {"logs", "registry.example/logs:7"},
	} {
		running.ContainerStatuses = append(running.ContainerStatuses, corev1.ContainerStatus{
			Name: c.name, Image: c.image, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		patch, err := patchOf("uid-bench", &pending, &running)
		if err != nil || patch == nil {
			b.Fatal(err)
		}
	}
}
