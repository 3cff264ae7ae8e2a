package registry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vkubelet/vkubelet/provider"
)

func none(context.Context, InitConfig) (provider.PodLifecycleHandler, error) { return nil, nil }

func TestBuiltinHasVkubeletsProvidersSorted(t *testing.T) {
	got := Builtin().Names()
	for _, name := range []string{"cri", "interlink", "kube", "mock", "remote", "slurm"} {
		if !slices.Contains(got, name) {
			t.Errorf("Builtin().Names() = %v, without %s", got, name)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("Builtin().Names() = %v, not sorted", got)
	}
}

func TestAddingToABuiltinRegistryChangesNoOther(t *testing.T) {
	r := Builtin()
	if err := r.Add("edge", none); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Names(), "edge") {
		t.Errorf("Names() = %v, without the provider added", r.Names())
	}
	if slices.Contains(Builtin().Names(), "edge") {
		t.Error("a provider added to one registry is in the next Builtin()")
	}
}

func TestAddRefusesATakenNameAndANilConstructor(t *testing.T) {
	var r Registry
	if err := r.Add("edge", none); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("edge", none); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("Add of a taken name: err = %v", err)
	}
	if err := Builtin().Add("mock", none); err == nil {
		t.Error("Add of a built-in's name succeeded")
	}
	if err := r.Add("other", nil); err == nil {
		t.Error("Add of a nil constructor succeeded")
	}
}

func TestNewOfAnUnknownProviderNamesTheKnownOnes(t *testing.T) {
	_, err := Builtin().New(context.Background(), "nope", InitConfig{NodeName: "n"})
	if err == nil || !strings.Contains(err.Error(), `unknown provider "nope"`) || !strings.Contains(err.Error(), "mock") {
		t.Errorf("err = %v, want one naming the provider and the known ones", err)
	}
}
