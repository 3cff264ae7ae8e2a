// Package nodetest runs virtual nodes in the test process, for integration tests
// that need a whole node (agent) against the control plane of package testenv. It
// is a package of its own because the agent imports the packages whose tests use
// testenv.
package nodetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/agent"
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
