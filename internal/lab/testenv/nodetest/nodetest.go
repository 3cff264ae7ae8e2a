// Package nodetest runs virtual nodes in the test process, for integration tests
// that need a whole node (agent) against the control plane of package testenv. It
// is a package of its own because the agent imports the packages whose tests use
// testenv.
package nodetest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/cri"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// Run runs a virtual node with cfg in this process until stop is called or
// the test ends, and returns it once it is ready. A node that stops with an error
// fails the test.
func Run(t testing.TB, cfg agent.Config) (n *agent.Node, stop func()) {
	t.Helper()
	n, err := agent.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, func() { close(ready) }) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node %s: %v", cfg.NodeName, err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node %s stopped: %v", cfg.NodeName, err)
	case <-time.After(time.Minute):
		t.Fatalf("node %s not ready", cfg.NodeName)
	}
	return n, stop
}

// config is a test node's configuration with the provider's configuration
// providerCfg written as JSON: against the package's control plane, quick leases
// and polls, logs discarded.
func config(t testing.TB, name, provider string, providerCfg any) agent.Config {
	t.Helper()
	b, err := json.Marshal(providerCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), provider+".json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return agent.Config{
		NodeName: name, Provider: provider, ProviderConfig: cfgPath, RESTConfig: testenv.ControlPlane(t).RESTConfig,
		InternalIP: "127.0.0.1", KubeletPort: 0, PodSyncWorkers: 10, CertDir: t.TempDir(),
		StatusPollInterval: time.Second, StartupTimeout: time.Minute,
		LeaseDuration: 10 * time.Second, RenewInterval: 2 * time.Second,
		KubeAPIQPS: 100, KubeAPIBurst: 200,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// MockConfig is the configuration of a test node named name with the mock
// provider configured by mockCfg, against the package's control plane: quick
// leases and polls, a self-signed serving certificate, logs discarded.
func MockConfig(t testing.TB, name string, mockCfg mock.Config) agent.Config {
	t.Helper()
	cfg := config(t, name, "mock", mockCfg)
	cfg.SelfSignedServingCert = true
	return cfg
}

// CRIConfig is the configuration of a test node named name with the CRI provider
// on env's containerd, against the package's control plane: its serving
// certificate from the cluster (approved by the node), quick leases and polls,
// logs discarded.
func CRIConfig(t testing.TB, name string, env *crienv.Env, edits ...func(*cri.Config)) agent.Config {
	t.Helper()
	criCfg := cri.Config{
		RuntimeEndpoint: env.Socket,
		RootDir:         t.TempDir(),
		BackoffBase:     cri.Duration{Duration: time.Second},
		SyncInterval:    cri.Duration{Duration: 200 * time.Millisecond},
	}
	for _, edit := range edits {
		edit(&criCfg)
	}
	cfg := config(t, name, "cri", criCfg)
	cfg.PodSyncWorkers, cfg.ApproveServingCSR = 4, true
	return cfg
}
