package testenv

import (
	"os"
	"testing"
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
	t.Skipf("skipped: %v", err)
}

// InCI reports whether the tests run in CI (CI=true, as .ci/run and the CI
// services set it).
func InCI() bool { return os.Getenv("CI") == "true" }
