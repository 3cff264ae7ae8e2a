package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAdmitOS(t *testing.T) {
	cases := []struct {
		name   string
		os     *corev1.PodOS
		label  string
		reason string // "" admitted
	}{
		{"no OS said", nil, "", ""},
		{"the node's", &corev1.PodOS{Name: corev1.Linux}, "linux", ""},
		{"another in spec.os", &corev1.PodOS{Name: corev1.Windows}, "", ReasonPodOSNotSupported},
		{"another in its label", nil, "windows", ReasonPodOSSelectorNodeLabelDoesNotMatch},
		{"both: the label first, as the kubelet", &corev1.PodOS{Name: corev1.Windows}, "windows", ReasonPodOSSelectorNodeLabelDoesNotMatch},
	}
	for _, c := range cases {
		p := &corev1.Pod{Spec: corev1.PodSpec{OS: c.os}}
		if c.label != "" {
			p.Labels = map[string]string{corev1.LabelOSStable: c.label}
		}
		reason, _, ok := admitOS(p, "linux")
		if ok != (c.reason == "") || reason != c.reason {
			t.Errorf("%s: admitted %v (%q), want reason %q", c.name, ok, reason, c.reason)
		}
	}
}
