package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// mockPlacement is where a SIGKILL test's mock provider runs: in the node
// process, with its state in a file that the restarted node reads back, or in a
// `vkubelet provider serve` process of its own behind the provider protocol,
// which the node's SIGKILL leaves running with its state in memory.
type mockPlacement struct {
	name string
	// separate runs the mock in a provider process.
	separate bool
}

var mockPlacements = []mockPlacement{
	{name: "mock in the node process"},
	{name: "mock in a provider process", separate: true},
}

// suffix tells the nodes of the placements apart in the one cluster.
func (m mockPlacement) suffix() string {
	if m.separate {
		return "-remote"
	}
	return ""
}

// providerArgs returns the node's flags for a mock with cfg running pods for node,
// starting the provider process first for a separate one. stop ends that process
// with SIGTERM once the test is done with it; it does nothing for a mock in the
// node's process.
func (m mockPlacement) providerArgs(t *testing.T, node string, cfg mock.Config) (args []string, stop func()) {
	t.Helper()
	mockConfig := writeMockConfig(t, cfg)
	if !m.separate {
		return []string{"--provider", "mock", "--provider-config", mockConfig}, func() {}
	}
	sock := socketPath(t)
	serve := serveMock(t, binary, mockConfig, node, sock)
	remoteConfig := remoteConfigFor(t, sock)
	return []string{"--provider", "remote", "--provider-config", remoteConfig}, func() {
		t.Helper()
		stopGracefully(t, serve, "provider process")
	}
}

// socketPath is a path for a provider process's unix socket, in a directory
// removed when the test ends: a short one, as a unix socket's path is limited
// to about 100 bytes.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vkp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "provider.sock")
}

// serveMock starts bin's `provider serve` of the mock with the configuration
// file mockConfig for node on the unix socket sock, and waits for the socket.
func serveMock(t *testing.T, bin, mockConfig, node, sock string) *nodeProcess {
	t.Helper()
	serve := startBinary(t, bin, "provider", "serve", "--provider", "mock", "--provider-config", mockConfig,
		"--nodename", node, "--listen", "unix://"+sock)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, "the provider process's socket is not there yet"
	})
	return serve
}

// remoteConfigFor writes the remote provider's configuration for a provider
// process on the unix socket sock and returns its path.
func remoteConfigFor(t *testing.T, sock string) string {
	t.Helper()
	b, err := json.Marshal(remote.Config{Endpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "remote.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
