package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// Starting nodes are paced: at most startSlots of a fleet's nodes are between
// the start of their Run and their readiness at once. A NodeSet's thousand
// nodes starting together would otherwise have some thousands of requests in
// flight to register their Nodes and Leases: a goroutine each in the HTTP/2
// client and more connections dialled, and the runtime keeps the descriptor of
// every goroutine it ever ran (about 500 bytes) for good, which came to about
// 1.4 KiB of the live heap per idle node. Paced, the burst is as wide as a few
// dozen nodes' start, and the API server sees a steadier stream too.
const startSlots = 64

// stuckAfter is how long the slots may all stay taken before a node starts
// without one: nodes that are not becoming ready (their provider slow to
// answer, the API server refusing their Node) do not hold up the rest. Once a
// slot is given back, pacing resumes.
const stuckAfter = 10 * time.Second

// pacer hands out the start slots.
type pacer struct {
	clock clock.WithDelayedExecution
	max   int

	mu    sync.Mutex
	taken int
	// moved is when a slot was last taken or given back; freed is closed (and
	// replaced) when one is given back or the slots are found stuck.
	moved time.Time
	freed chan struct{}
	// stuck: every slot has been taken for stuckAfter and none given back;
	// nodes start without one until one is. watching: the pacer's one timer is
	// set to look (watch), rather than a timer for each waiting node: a
	// stopped runtime timer stays in its heap a while, and a NodeSet's
	// thousand waiting nodes left about 400 bytes each behind.
	stuck, watching bool
}

// newPacer returns a pacer of n slots whose stuck slots are told by clk's
// timers, or the real clock's if clk has none.
func newPacer(n int, clk clock.Clock) *pacer {
	timers, ok := clk.(clock.WithDelayedExecution)
	if !ok {
		timers = clock.RealClock{}
	}
	return &pacer{clock: timers, max: n, moved: timers.Now(), freed: make(chan struct{})}
}

// pace returns run with its start paced: it waits for a slot (or until the
// slots have been stuck for stuckAfter), and gives the slot back once the node
// is ready or run returns, whichever is first.
func (p *pacer) pace(run func(context.Context, agent.Config, func()) error) func(context.Context, agent.Config, func()) error {
	return func(ctx context.Context, cfg agent.Config, ready func()) error {
		s := &slot{p: p}
		if !p.take(ctx, s) {
			return nil
		}
		defer s.giveBack()
		return run(ctx, cfg, func() {
			s.giveBack()
			ready()
		})
	}
}

// take waits for a slot and records it in s; s holds none if the slots are
// stuck. False if ctx ended first.
func (p *pacer) take(ctx context.Context, s *slot) bool {
	for {
		p.mu.Lock()
		if p.taken < p.max {
			p.taken++
			p.moved = p.clock.Now()
			p.mu.Unlock()
			s.held.Store(true)
			return true
		}
		if p.stuck {
			p.mu.Unlock()
			return true // without a slot
		}
		if !p.watching {
			p.watching = true
			p.watchIn(stuckAfter - p.clock.Since(p.moved))
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

// watch looks whether the slots are stuck: all taken, none moved for
// stuckAfter. If so, it lets the waiting nodes start; if they may yet be, it
// looks again when they would be.
func (p *pacer) watch() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watching = false
	if p.taken < p.max || p.stuck {
		return
	}
	if left := stuckAfter - p.clock.Since(p.moved); left > 0 {
		p.watching = true
		p.watchIn(left)
		return
	}
	p.stuck = true
	p.wakeLocked()
}

// watchIn has watch called after d, on a goroutine of its own: a fake clock
// calls its timers' functions while it holds its lock, and watch reads the
// clock.
func (p *pacer) watchIn(d time.Duration) {
	p.clock.AfterFunc(d, func() { go p.watch() })
}

// wakeLocked wakes the nodes waiting for a slot.
func (p *pacer) wakeLocked() {
	close(p.freed)
	p.freed = make(chan struct{})
}

// slot is a starting node's claim on a slot.
type slot struct {
	p    *pacer
	held atomic.Bool
}

// giveBack gives the slot back, if s holds one; the first call only.
func (s *slot) giveBack() {
	if !s.held.CompareAndSwap(true, false) {
		return
	}
	p := s.p
	p.mu.Lock()
	p.taken--
	p.moved = p.clock.Now()
	p.stuck = false
	p.wakeLocked()
	p.mu.Unlock()
}
