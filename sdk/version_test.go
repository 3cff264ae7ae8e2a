package sdk

import (
	"runtime/debug"
	"testing"
)

func TestTheVersionIsTheOneOfVkubeletsModuleAProgramRequires(t *testing.T) {
	for _, tc := range []struct {
		name string
		deps []*debug.Module
		want string
	}{
		{"a release", []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.1"}, {Path: modulePath, Version: "v0.4.0"}}, "v0.4.0"},
		{"a checkout", []*debug.Module{{Path: modulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "../.."}}}, ""},
		{"vkubelet's own module", []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := moduleVersion(&debug.BuildInfo{Deps: tc.deps}); got != tc.want {
				t.Errorf("moduleVersion = %q, want %q", got, tc.want)
			}
		})
	}
}
