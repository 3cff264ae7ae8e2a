package bench

import (
	"context"
	"fmt"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// node is a node implementation under measurement: a child process that keeps a
// Node object Ready and runs the pods bound to it.
type node struct {
	kind  string   // "vkubelet" or "kwok"
	names []string // the Node objects
	proc  *proc.Child
	// provider, if set, is the provider's own process (`vkubelet provider
	// serve`) behind the agent: its CPU is reported next to the agent's.
	provider *proc.Child
	// metricsURL serves the process's Go runtime metrics (/metrics) and pprof
	// (/debug/pprof), for its live heap; empty if it serves none.
	metricsURL string
	// registeredIsReady: the Node is measured once it exists, as its provider
	// reports it NotReady on purpose (upstream's mock: KubeletPending).
	registeredIsReady bool
	// writes returns the API writes counted so far for the node, keyed
	// "VERB resource[/subresource]".
	writes func(ctx context.Context) (map[string]float64, error)
	// podWatches, if set, returns how many pod watches the process has opened
	// (each watch the API server closes is one more): the agent's own count.
	podWatches func(ctx context.Context) (float64, error)
	// benchWrites are writes, per pod started, that writes counts but the benchmark
	// itself made; they are subtracted.
	benchWrites map[string]float64
	// cleanup, if set, runs after the process has stopped.
	cleanup func()
}

// countPodWatches is podWatches, or 0 for a process that does not count them.
func (n *node) countPodWatches(ctx context.Context) (float64, error) {
	if n.podWatches == nil {
		return 0, nil
	}
	return n.podWatches(ctx)
}

func (n *node) stop() {
	n.proc.Stop()
	if n.cleanup != nil {
		n.cleanup()
	}
}

// failed adds the end of the node's log to err.
func (n *node) failed(err error) error {
	return fmt.Errorf("%s: %w; %s log:\n%s", n.kind, err, n.kind, n.proc.Tail())
}
