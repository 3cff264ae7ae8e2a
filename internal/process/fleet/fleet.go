// Package fleet runs the virtual nodes of one process (`vkubelet run --config`)
// and changes the set while it runs: a node added to the configuration starts, a
// removed one stops, a changed one restarts, and the others go on untouched. A
// node that fails is started again with back-off, without stopping the others.
//
// The nodes of a NodeSet share one API client, the pod and Node watches, the
// caches of referenced objects, the Event broadcaster, the kubelet API's
// authentication and the metrics (agent.Shared), unless each has an identity of
// its own (a bootstrap credential). Each node keeps its own queues, workers,
// Lease renewal and kubelet API port (docs/ARCHITECTURE.md).
//
// With leader election, replicas of one configuration run each node in one
// replica at a time, the one holding the node's election Lease: the first to
// start takes every node (election.go), or, with LeaderElection.Replicas, each
// runs about its share of them (spread.go, membership.go, spreadnode.go).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/clockwait"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
)

// Flags of the command line that are also fields of a NodeSet's nodes. Given
// explicitly, they win over the file, for every node.
const (
	FlagProvider       = "provider"
	FlagProviderConfig = "provider-config"
	FlagDisableTaint   = "disable-taint"
)

// Config configures a Fleet.
type Config struct {
	// Base is every node's configuration before the file's fields: the command
	// line's. Its NodeName, MetricsAddr and HealthzAddr are not used.
	Base agent.Config
	// Explicit holds the Flag* names given on the command line.
	Explicit map[string]bool
	Logger   *slog.Logger
	// Run runs one node until ctx ends, calling ready once it is; nil runs an
	// agent.Node. Tests replace it.
	Run func(ctx context.Context, cfg agent.Config, ready func()) error
	// RestartBackoff is the first wait before a failed node starts again, doubled
	// up to a minute, each wait up to 20% longer at random. Default 1s.
	RestartBackoff time.Duration
	// Clock times the restart back-off; nil is the real clock. Tests pass a fake.
	Clock clock.Clock
	// LeaderElection, if set, runs each node only while this replica holds the
	// node's Lease (election.go).
	LeaderElection *LeaderElection
	// SingleNode says the fleet runs the one node of the command line
	// (--leader-elect without --config): its port, certificate directory and
	// kubeconfig stay the command line's.
	SingleNode bool
}

// Fleet is the set of running nodes.
type Fleet struct {
	cfg Config
	// shared is the nodes' shared machinery, nil if they cannot share; it runs
	// until stopShared is called and then closes sharedDone.
	shared     *agent.Shared
	stopShared context.CancelFunc
	sharedDone chan struct{}

	// spread, leases and membership share the nodes with other replicas
	// (LeaderElection.Replicas); nil without. The membership runs from the
	// first Apply until its context ends.
	spread     *spreader
	leases     *leases
	membership *membership
	joinOnce   sync.Once
	leave      context.CancelFunc

	mu      sync.Mutex
	members map[string]*member
	wg      sync.WaitGroup
}

// member is one running node.
type member struct {
	spec   nodeconfig.Node
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{} // closed once the node is ready (its first start)
	// standby: another replica holds the node (leader election).
	standby atomic.Bool
}

// New returns an empty fleet; Apply starts nodes.
func New(cfg Config) (*Fleet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Nodes run by a test's Run have no use for shared machinery.
	agents := cfg.Run == nil
	if agents {
		cfg.Run = runAgent
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cfg.Run = newPacer(startSlots, cfg.Clock).pace(cfg.Run)
	if cfg.LeaderElection != nil {
		le := *cfg.LeaderElection
		if err := checkLeaderElection(&le); err != nil {
			return nil, err
		}
		cfg.LeaderElection = &le
	}
	f := &Fleet{cfg: cfg, members: map[string]*member{}}
	if le := cfg.LeaderElection; le != nil && le.Replicas > 0 {
		// Settle: two retry periods, so that replicas starting together see
		// each other before any takes a node; grace: a lease duration, the
		// longest a node waits when replicas disagree (spread.go).
		f.spread = newSpreader(le.Identity, 2*le.RetryPeriod, le.LeaseDuration)
		f.leases = &leases{client: le.Client.CoordinationV1(), ns: le.Namespace, me: le.Identity,
			duration: le.LeaseDuration, clock: cfg.Clock}
		f.membership = newMembership(f.leases, le.Group, le.Replicas, f.spread, cfg.Clock,
			le.RetryPeriod, le.RenewDeadline, cfg.Logger.With("group", le.Group))
	}
	base := cfg.Base
	if agents && !cfg.SingleNode && !base.OwnIdentity() {
		ctx, cancel := context.WithCancel(context.Background())
		shared, err := agent.NewShared(ctx, base)
		if err != nil {
			cancel()
			return nil, err
		}
		f.shared, f.stopShared, f.sharedDone = shared, cancel, make(chan struct{})
		go func() {
			defer close(f.sharedDone)
			shared.Run(ctx)
		}()
	}
	return f, nil
}

func (f *Fleet) log(node string) *slog.Logger { return f.cfg.Logger.With("node", node) }

func runAgent(ctx context.Context, cfg agent.Config, ready func()) error {
	n, err := agent.New(ctx, cfg)
	if err != nil {
		return err
	}
	return n.Run(ctx, ready)
}

// Apply makes the running nodes those of nodes: it stops the nodes no longer
// listed and those whose entry changed (each stop waits for the node to end),
// then starts the new and changed ones under ctx. It returns the names started
// and stopped.
func (f *Fleet) Apply(ctx context.Context, nodes []nodeconfig.Node) (started, stopped []string) {
	want := make(map[string]nodeconfig.Node, len(nodes))
	for _, n := range nodes {
		want[n.Name] = n
	}
	f.mu.Lock()
	var ending []*member
	for name, m := range f.members {
		if n, ok := want[name]; !ok || !reflect.DeepEqual(n, m.spec) {
			m.cancel()
			ending = append(ending, m)
			delete(f.members, name)
			stopped = append(stopped, name)
		}
	}
	f.mu.Unlock()
	for _, m := range ending {
		<-m.done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.spread != nil {
		for _, name := range stopped {
			if _, ok := want[name]; !ok {
				f.spread.remove(name)
			}
		}
		for _, n := range nodes {
			f.spread.add(n.Name)
		}
		f.joinOnce.Do(func() {
			mctx, leave := context.WithCancel(ctx)
			f.leave = leave
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.membership.run(mctx)
			}()
		})
	}
	for _, n := range nodes {
		if _, running := f.members[n.Name]; running {
			continue
		}
		f.members[n.Name] = f.start(ctx, n)
		started = append(started, n.Name)
	}
	slices.Sort(stopped)
	return started, stopped
}

// start runs one node until its context ends, starting it again after a failure
// with back-off (restartBackoff) on the fleet's clock.
func (f *Fleet) start(ctx context.Context, n nodeconfig.Node) *member {
	ctx, cancel := context.WithCancel(ctx)
	m := &member{spec: n, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(m.done)
		var once sync.Once
		ready := func() { once.Do(func() { close(m.ready) }) }
		restarts := clockwait.Backoff(f.cfg.Clock, f.restartBackoff().DelayFunc())
		wait.BackoffUntilWithContext(ctx, func(ctx context.Context) {
			err := f.runMember(ctx, m, ready)
			for errors.Is(err, errHandedOver) && ctx.Err() == nil {
				err = f.runMember(ctx, m, ready) // standing by again at once
			}
			if ctx.Err() == nil {
				f.log(m.spec.Name).Error("node stopped; starting it again after a back-off", "error", err)
			}
		}, restarts, true)
	}()
	return m
}

// restartBackoff paces the restarts of a failed node: from RestartBackoff,
// doubling, up to a minute; each wait is up to 20% longer at random, so that the
// nodes that failed together (their API server away, say) do not all start again
// together.
func (f *Fleet) restartBackoff() wait.Backoff {
	return wait.Backoff{Duration: f.cfg.RestartBackoff, Factor: 2, Jitter: 0.2, Cap: time.Minute, Steps: math.MaxInt32}
}

// runMember runs m's node once, until it fails or ctx ends.
func (f *Fleet) runMember(ctx context.Context, m *member, ready func()) error {
	// Made again at each start rather than kept: the node's agent keeps its
	// own copy, and a NodeSet's thousand running nodes would keep a second
	// one each for their restarts.
	cfg := f.NodeConfig(m.spec)
	switch {
	case f.spread != nil:
		return f.runSpread(ctx, m, cfg, ready)
	case f.cfg.LeaderElection != nil:
		return f.runHeld(ctx, m, cfg, ready)
	default:
		return f.cfg.Run(ctx, cfg, ready)
	}
}

// NodeConfig is the agent configuration of node n: the base, with the file's
// fields where the command line did not give them, and the node's own name,
// certificate directory and, with a bootstrap credential, kubeconfig.
func (f *Fleet) NodeConfig(n nodeconfig.Node) agent.Config {
	c := f.cfg.Base
	c.NodeName = n.Name
	c.Shared = f.shared
	// One process serves health for all its nodes (Fleet.HealthHandler); each
	// node's metrics are on its kubelet port (and the one node's on MetricsAddr).
	c.HealthzAddr = ""
	if !f.cfg.SingleNode {
		c.MetricsAddr = ""
	}
	if n.Provider != "" && !f.cfg.Explicit[FlagProvider] {
		c.Provider = n.Provider
	}
	if n.ProviderConfig != "" && !f.cfg.Explicit[FlagProviderConfig] {
		c.ProviderConfig = n.ProviderConfig
	}
	if n.DisableProviderTaint != nil && !f.cfg.Explicit[FlagDisableTaint] {
		c.DisableTaint = *n.DisableProviderTaint
	}
	// Nodes of one process cannot share a port: a node listens where the file
	// says, else on a free port it advertises.
	if f.cfg.SingleNode {
		return c
	}
	c.KubeletPort = 0
	if n.KubeletPort != nil {
		c.KubeletPort = *n.KubeletPort
	}
	c.NodeLabels = maps.Clone(n.Labels)
	c.NodeTaints = slices.Clone(n.Taints)
	c.NodeCapacity = n.Capacity.DeepCopy()
	dir := filepath.Join(os.TempDir(), "vkubelet-"+n.Name, "pki")
	if c.CertDir != "" {
		dir = filepath.Join(c.CertDir, n.Name)
	}
	c.CertDir = dir
	if c.OwnIdentity() {
		// Each node keeps the kubeconfig of its own identity.
		c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	}
	return c
}

// Shared is the machinery the nodes share, nil if they cannot (each has an
// identity of its own) or the fleet runs one node.
func (f *Fleet) Shared() *agent.Shared { return f.shared }

// Running returns the names of the running nodes, sorted.
func (f *Fleet) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.members))
}

// Ready reports whether every running node has been ready once, naming one that
// has not. A node another replica holds counts as ready: this replica stands by.
func (f *Fleet) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(f.members)) {
		m := f.members[name]
		select {
		case <-m.ready:
		default:
			if !m.standby.Load() {
				return false, fmt.Sprintf("node %s is not ready", name)
			}
		}
	}
	return true, ""
}

// WaitReady waits until every running node has been ready once, or ctx ends.
func (f *Fleet) WaitReady(ctx context.Context) error {
	f.mu.Lock()
	var chans []<-chan struct{}
	for _, m := range f.members {
		chans = append(chans, m.ready)
	}
	f.mu.Unlock()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// HealthHandler serves /healthz (the process runs) and /readyz (every node has
// been ready), unauthenticated, for probes: --healthz-addr of a NodeSet.
func (f *Fleet) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := f.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Stop stops every node and waits for them to end. A replica sharing the
// nodes leaves the replicas first, so that the others count it out while its
// nodes stop and take them as their Leases are given up.
func (f *Fleet) Stop() {
	f.mu.Lock()
	if f.leave != nil {
		f.leave()
	}
	for name, m := range f.members {
		m.cancel()
		delete(f.members, name)
	}
	f.mu.Unlock()
	f.wg.Wait()
	if f.shared != nil {
		f.stopShared()
		<-f.sharedDone
	}
}
