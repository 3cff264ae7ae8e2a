package pod

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
)

// queueFixture is a controller with nothing but what its queues need, on a
// fake clock that the test steps for delayed adds and retries.
func queueFixture(t *testing.T) (*Controller, *clocktesting.FakeClock, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	timer := sharedtimer.New(clk)
	go timer.Run(ctx)
	return &Controller{metrics: NewMetrics(), clock: clk, timer: timer,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, clk, ctx
}

// stepUntil moves clk on by d at each poll until cond holds: a delayed add
// (or retry) made meanwhile is due at the first step after it, whenever it
// was made.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		clk.Step(d)
		return cond()
	})
}

// dispatchers counts the goroutines running a node queue's dispatcher.
func dispatchers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "(*nodeQueue).dispatch(")
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 10*time.Second, func() (bool, string) { return cond(), "waiting for " + what })
}

// isDispatching reports whether a dispatcher of q runs.
func isDispatching(q *nodeQueue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dispatching
}

// An idle node's queue costs neither a client-go queue nor a goroutine; the
// dispatcher runs while there are items, and exits once they are handled.
func TestANodeQueueDispatchesOnlyWhileItHasItems(t *testing.T) {
	c, clk, ctx := queueFixture(t)
	var handled sync.Map
	q := c.newNodeQueue("test", func(_ context.Context, key string) error {
		handled.Store(key, true)
		return nil
	}, 2)
	base := dispatchers()
	q.start(ctx)
	if q.q != nil {
		t.Fatal("an unused queue was built")
	}
	if n := dispatchers() - base; n != 0 {
		t.Fatalf("%d dispatchers for an empty queue", n)
	}
	for _, k := range []string{"ns/a", "ns/b", "ns/c"} {
		q.Add(k)
	}
	waitFor(t, "the items to be handled", func() bool {
		_, a := handled.Load("ns/a")
		_, b := handled.Load("ns/b")
		_, c := handled.Load("ns/c")
		return a && b && c
	})
	waitFor(t, "the dispatcher to exit", func() bool { return dispatchers() == base })

	// A delayed add, put in the queue by the timer, starts a dispatcher again.
	q.AddAfter("ns/later", 50*time.Millisecond)
	stepUntil(t, clk, 50*time.Millisecond, "the delayed item to be handled", func() bool { _, ok := handled.Load("ns/later"); return ok })
	waitFor(t, "the dispatcher to exit", func() bool { return dispatchers() == base })
}

// Items added before start wait for it; a failing item comes back after its
// back-off, through the timer, with no dispatcher waiting meanwhile.
func TestANodeQueueRetriesFailuresAndWaitsForStart(t *testing.T) {
	c, clk, ctx := queueFixture(t)
	var calls atomic.Int32
	q := c.newNodeQueue("test", func(context.Context, string) error {
		if calls.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}, 1)
	q.Add("ns/a")
	// Before start an add starts no dispatcher (kick decides at once).
	if n := calls.Load(); n != 0 || isDispatching(q) {
		t.Fatalf("handled %d times before start (dispatching: %v)", n, isDispatching(q))
	}
	q.start(ctx)
	// The first back-off is 200 ms.
	stepUntil(t, clk, 200*time.Millisecond, "the retry", func() bool { return calls.Load() == 2 })
	// The retry succeeded: the item is forgotten, with no retry waiting.
	waitFor(t, "the item to be done", func() bool { return q.Len() == 0 && !isDispatching(q) })
	if n := q.queue().NumRequeues("ns/a"); n != 0 {
		t.Fatalf("the item has %d retries recorded after it succeeded", n)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handled %d times; want 2 (a failure, then its retry)", n)
	}
}

// The worker limit holds across dispatcher runs, and an item added again while
// it is handled is handled once more after (queued by client-go at Done, not
// through an add).
func TestANodeQueueKeepsItsWorkerLimitAndRequeuedItems(t *testing.T) {
	c, _, ctx := queueFixture(t)
	const workers = 3
	var running, peak, total atomic.Int32
	release := make(chan struct{})
	var q *nodeQueue
	var again sync.Once
	q = c.newNodeQueue("test", func(_ context.Context, key string) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if key == "ns/0" {
			again.Do(func() { q.Add("ns/0") }) // while it is being handled
		}
		<-release
		total.Add(1)
		return nil
	}, workers)
	q.start(ctx)
	for i := range 10 {
		q.Add("ns/" + string(rune('0'+i)))
	}
	waitFor(t, "the workers to fill", func() bool { return running.Load() == workers })
	close(release)
	waitFor(t, "every item and the re-added one", func() bool { return total.Load() == 11 })
	if p := peak.Load(); p > workers {
		t.Fatalf("%d items handled at once; the limit is %d", p, workers)
	}
}

// After ShutDown nothing is built or handled.
func TestAShutDownNodeQueueTakesNothing(t *testing.T) {
	c, _, ctx := queueFixture(t)
	var calls atomic.Int32
	q := c.newNodeQueue("test", func(context.Context, string) error { calls.Add(1); return nil }, 1)
	q.start(ctx)
	q.ShutDown()
	q.Add("ns/a") // dropped at once: no queue is built, no dispatcher started
	if q.q != nil || calls.Load() != 0 || isDispatching(q) {
		t.Fatalf("a shut-down queue took an item (queue built: %v, handled %d)", q.q != nil, calls.Load())
	}
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get on a shut-down queue did not report the shutdown")
	}
	q.Done("ns/a")
}
