package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Outside CI a test that cannot run here is skipped, and its reason is written
// where make test collects them; in CI it fails (not checked here: it would
// fail this test).
func TestRequireSkipsAndRecordsWhy(t *testing.T) {
	t.Setenv("CI", "")
	skips := filepath.Join(t.TempDir(), "skips")
	t.Setenv(SkipsFileEnv, skips)
	t.Run("without-containerd", func(t *testing.T) { Require(t, errors.New("containerd needs root")) })
	t.Run("with-everything", func(t *testing.T) { Require(t, nil) })
	b, err := os.ReadFile(skips)
	if err != nil {
		t.Fatal(err)
	}
	if want := "TestRequireSkipsAndRecordsWhy/without-containerd: containerd needs root\n"; string(b) != want {
		t.Errorf("recorded %q, want %q", b, want)
	}
}
