package resolve

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkResolveEnv resolves the environment of a pod with literal values,
// $(VAR) references, a ConfigMap key, envFrom and the downward API, with the
// service-link variables of one Service.
func BenchmarkResolveEnv(b *testing.B) {
	src := world()
	src.svcs = []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{NodeName: "vk", Containers: []corev1.Container{{
			Name: "c", Image: "img",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}, Prefix: "CM_"}},
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "B", Value: "$(A)-two"},
				{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}},
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
		}}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := resolvePod(pod, src, parts{env: true}); err != nil {
			b.Fatal(err)
		}
	}
}
