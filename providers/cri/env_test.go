package cri

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

// The variables from the pod's IPs, and those referring to them, are set from
// the sandbox's IPs in the kubelet's order; the others stay as resolved.
func TestThePodsIPsReachTheEnvironment(t *testing.T) {
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "BEFORE", Value: "at-$(POD_IP)"}, // declared before: sees no POD_IP
		{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
		{Name: "POD_IPS", ValueFrom: fieldRef("status.podIPs")},
		{Name: "URL", Value: "http://$(POD_IP):$(PORT)/"},
		{Name: "ESCAPED", Value: "$$(POD_IP)"},
		{Name: "NAME", ValueFrom: fieldRef("metadata.name")},
		{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k"}}},
	}}
	// As the pod controller resolved it before the pod had an IP: PORT from
	// envFrom, a service variable at the end, MISSING optional and absent.
	env := []corev1.EnvVar{
		{Name: "PORT", Value: "8080"},
		{Name: "BEFORE", Value: "at-$(POD_IP)"},
		{Name: "POD_IP", Value: ""},
		{Name: "POD_IPS", Value: ""},
		{Name: "URL", Value: "http://:8080/"},
		{Name: "ESCAPED", Value: "$(POD_IP)"},
		{Name: "NAME", Value: "web"},
		{Name: "KUBERNETES_PORT", Value: "tcp://10.0.0.1:443"},
	}
	orig := append([]corev1.EnvVar(nil), env...)
	got := withPodIPs(c, env, []string{"10.1.2.3", "fd00::3"})
	want := []corev1.EnvVar{
		{Name: "PORT", Value: "8080"},
		{Name: "BEFORE", Value: "at-$(POD_IP)"},
		{Name: "POD_IP", Value: "10.1.2.3"},
		{Name: "POD_IPS", Value: "10.1.2.3,fd00::3"},
		{Name: "URL", Value: "http://10.1.2.3:8080/"},
		{Name: "ESCAPED", Value: "$(POD_IP)"},
		{Name: "NAME", Value: "web"},
		{Name: "KUBERNETES_PORT", Value: "tcp://10.0.0.1:443"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(env, orig) {
		t.Error("the resolved environment was changed")
	}
	if got := withPodIPs(&corev1.Container{Env: c.Env[5:]}, env, []string{"10.1.2.3"}); &got[0] != &env[0] {
		t.Error("an environment without pod IPs was copied")
	}
}
