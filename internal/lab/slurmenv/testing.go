package slurmenv

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// StartForTest starts a cluster with opts and a registry holding the tests'
// images for its podman, both stopped when t ends, and writes the provider's
// configuration for them to a file (skipping t where Slurm or podman cannot
// run). It returns the cluster, the registry, the configuration and its path.
func StartForTest(t testing.TB, opts Options) (env *Env, registry *crienv.Env, cfg slurm.Config, cfgFile string) {
	t.Helper()
	testenv.Require(t, Available())
	testenv.Require(t, PodmanAvailable())
	env, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	registry, err = crienv.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(registry.Stop)
	if cfg, err = env.ProviderConfig(registry.Registry); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile = filepath.Join(t.TempDir(), "slurm.json")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return env, registry, cfg, cfgFile
}
