package resolve

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEveryPodGetsTheSameBytesOfAConfigMapVersion(t *testing.T) {
	var s sharedConfigMapBytes
	v1 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt", ResourceVersion: "1"},
		Data: map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----"}}
	a, b := s.get(v1, "ca.crt", v1.Data["ca.crt"]), s.get(v1, "ca.crt", v1.Data["ca.crt"])
	if string(a) != v1.Data["ca.crt"] || &a[0] != &b[0] {
		t.Fatal("two pods of one ConfigMap version got different copies of a value")
	}
	v2 := v1.DeepCopy()
	v2.ResourceVersion, v2.Data["ca.crt"] = "2", "-----BEGIN CERTIFICATE----- rotated"
	c := s.get(v2, "ca.crt", v2.Data["ca.crt"])
	if string(c) != v2.Data["ca.crt"] || string(a) != v1.Data["ca.crt"] {
		t.Fatalf("after an update: new %q, old %q", c, a)
	}
	s.forget(objectKey{kindConfigMap, "ns", "kube-root-ca.crt"})
	if len(s.byObject) != 0 {
		t.Errorf("%d ConfigMaps kept after forget, want 0", len(s.byObject))
	}
}
