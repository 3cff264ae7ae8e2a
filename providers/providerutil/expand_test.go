package providerutil

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExpandReplacesDefinedVariablesOnly(t *testing.T) {
	env := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "two"}}
	got := ExpandCommand([]string{"$(A)-$(B)", "$(C)", "$$(A)", "plain $", "$(unclosed"}, env)
	want := []string{"1-two", "$(C)", "$(A)", "plain $", "$(unclosed"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ExpandCommand = %q, want %q", got, want)
	}
}
