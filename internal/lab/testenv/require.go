package testenv

import (
	"fmt"
	"os"
	"testing"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// Require stops a test that cannot run on this machine, as err says (root
// missing, a program not installed), or lets it go on if err is nil. Outside
// CI the test is skipped with err as the reason, so that a developer without,
// say, containerd gets a green run of the rest and is told what the skipped
// tests need. In CI (CI=true) it fails instead: CI proves everything, and
// scripts/setup.sh installs all that the tests need there.
func Require(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if InCI() {
		t.Fatalf("%v (CI runs every test: make test installs what they need)", err)
	}
	recordSkip(t, err)
	t.Skipf("skipped: %v", err)
}

// SkipsFileEnv names the file, if set, to which Require appends a line per test
// it skips: `make test` prints them at its end, since go test without -v does
// not show why a test was skipped.
const SkipsFileEnv = "VKUBELET_TEST_SKIPS"

func recordSkip(t testing.TB, why error) {
	path := os.Getenv(SkipsFileEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Logf("recording the skip in %s: %v", path, err)
		return
	}
	defer f.Close()
	// One write per line: O_APPEND keeps the lines of parallel packages whole.
	if _, err := fmt.Fprintf(f, "%s: %v\n", t.Name(), why); err != nil {
		t.Logf("recording the skip in %s: %v", path, err)
	}
}

// InCI reports whether the tests run in CI (CI=true, as .ci/run and the CI
// services set it).
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireAPIFeature skips a test of feature f on a release before the first
// the node uses it on (apifeatures.FirstRelease): RequireKubernetes for a
// feature of the node's start-up rule.
func RequireAPIFeature(t testing.TB, f apifeatures.Feature) {
	t.Helper()
	minor := apifeatures.FirstRelease(f)
	if minor == 0 {
		t.Fatalf("apifeatures knows no feature %s", f)
	}
	RequireKubernetes(t, minor, string(f))
}

// RequireKubernetes skips a test whose subject the control planes' Kubernetes
// release lacks (see controlplane.SelectedKubernetesVersion): what names it,
// minor is the first release that has it on by default. The version-skew
// matrix counts such a test as not applicable; the default release has
// everything the tests use, so `make test` never skips here.
func RequireKubernetes(t testing.TB, minor int, what string) {
	t.Helper()
	v := controlplane.SelectedKubernetesVersion()
	have, err := controlplane.MinorOf(v)
	if err != nil {
		t.Fatal(err)
	}
	if have < minor {
		t.Skipf("not applicable: %s needs Kubernetes 1.%d or later; the control plane is %s", what, minor, v)
	}
}
