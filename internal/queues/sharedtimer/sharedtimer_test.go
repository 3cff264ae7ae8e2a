package sharedtimer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// items takes what q holds now, without waiting.
func items(q workqueue.TypedInterface[string]) []string {
	var out []string
	for q.Len() > 0 {
		item, _ := q.Get()
		q.Done(item)
		out = append(out, item)
	}
	return out
}

// waitLen waits until q holds n items.
func waitLen(t *testing.T, q workqueue.TypedInterface[string], n int) {
	t.Helper()
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		l := q.Len()
		return l == n, fmt.Sprintf("queue holds %d items, want %d", l, n)
	})
}

func TestDelayedItemsOfSeveralQueuesArriveInTimeFromOneTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	timer := New(clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); timer.Run(ctx) }()
	defer func() { cancel(); <-done }()

	a, b := timer.Queue(workqueue.TypedQueueConfig[string]{}), timer.Queue(workqueue.TypedQueueConfig[string]{})
	a.AddAfter("a-late", 3*time.Second)
	a.AddAfter("a-soon", time.Second)
	b.AddAfter("b-mid", 2*time.Second)
	b.AddAfter("b-mid", 5*time.Second) // waiting already: keeps the earlier time
	a.AddAfter("a-now", 0)
	if got := items(a); len(got) != 1 || got[0] != "a-now" {
		t.Fatalf("before any time passed, a holds %v; want [a-now]", got)
	}
	for _, step := range []struct {
		a, b string
	}{{"a-soon", ""}, {"", "b-mid"}, {"a-late", ""}} {
		eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
			return clk.HasWaiters(), "the timer waits for nothing"
		})
		clk.Step(time.Second)
		if step.a != "" {
			waitLen(t, a, 1)
		}
		if step.b != "" {
			waitLen(t, b, 1)
		}
		ga, gb := items(a), items(b)
		if (step.a == "") != (len(ga) == 0) || (step.b == "") != (len(gb) == 0) ||
			(len(ga) > 0 && ga[0] != step.a) || (len(gb) > 0 && gb[0] != step.b) {
			t.Fatalf("at %s: a holds %v, b holds %v; want %q and %q", clk.Now().Sub(time.Unix(1000, 0)), ga, gb, step.a, step.b)
		}
	}
	b.ShutDown()
	b.AddAfter("after-shutdown", time.Second)
	timer.mu.Lock()
	left := len(timer.pending)
	timer.mu.Unlock()
	if left != 0 {
		t.Errorf("%d items pending after every one arrived and the other queue shut down, want 0", left)
	}
}

// runTimer runs a Timer on clk until the test ends.
func runTimer(t *testing.T, clk *clocktesting.FakeClock) *Timer {
	t.Helper()
	timer := New(clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); timer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return timer
}

// ticks records when (by clk) each tick came; the tick itself never blocks.
func ticks(clk *clocktesting.FakeClock) (chan time.Time, func()) {
	ch := make(chan time.Time, 16)
	return ch, func() {
		select {
		case ch <- clk.Now():
		default:
		}
	}
}

// step waits for the timer to wait on the clock, then moves the clock by d.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return clk.HasWaiters(), "the timer waits for nothing"
	})
	clk.Step(d)
}

// expectTick checks that the next tick on ch came at at, and expectNoTick that
// none is waiting.
func expectTick(t *testing.T, ch chan time.Time, at time.Time) {
	t.Helper()
	if got := eventually.Receive(t, ch, 5*time.Second, "a tick"); !got.Equal(at) {
		t.Fatalf("tick at %s, want %s", got.Sub(t0), at.Sub(t0))
	}
}

func expectNoTick(t *testing.T, ch chan time.Time) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("tick at %s, want none", got.Sub(t0))
	default:
	}
}

var t0 = time.Unix(1000, 0)

func TestTickersOfSeveralPeriodsTickFromOneTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	timer := runTimer(t, clk)
	renew, renewTick := ticks(clk)
	refresh, refreshTick := ticks(clk)
	timer.Every(10*time.Second, renewTick)
	timer.Every(25*time.Second, refreshTick)
	for i := 1; i <= 5; i++ {
		step(t, clk, 10*time.Second)
		expectTick(t, renew, t0.Add(time.Duration(i)*10*time.Second))
		if i == 3 { // due at 25 s, seen at 30 s
			expectTick(t, refresh, t0.Add(30*time.Second))
		}
		// 50 s: on the period's own beat (25 s, 50 s), not 25 s after the late tick.
		if i == 5 {
			expectTick(t, refresh, t0.Add(50*time.Second))
		}
		expectNoTick(t, refresh)
	}
}

func TestMissedTicksAreNotMadeUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	timer := runTimer(t, clk)
	ch, tick := ticks(clk)
	timer.Every(10*time.Second, tick)
	step(t, clk, 35*time.Second) // 10, 20 and 30 s passed: one tick
	expectTick(t, ch, t0.Add(35*time.Second))
	step(t, clk, 5*time.Second) // the next at 40 s, the period's beat
	expectTick(t, ch, t0.Add(40*time.Second))
	expectNoTick(t, ch)
}

func TestAStoppedTickerTicksNoMore(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	timer := runTimer(t, clk)
	stopped, stoppedTick := ticks(clk)
	kept, keptTick := ticks(clk)
	k := timer.Every(10*time.Second, stoppedTick)
	timer.Every(10*time.Second, keptTick)
	step(t, clk, 10*time.Second)
	expectTick(t, stopped, t0.Add(10*time.Second))
	expectTick(t, kept, t0.Add(10*time.Second))
	k.Stop()
	k.Stop() // twice is fine
	step(t, clk, 10*time.Second)
	expectTick(t, kept, t0.Add(20*time.Second)) // the timer ran past the stopped ticker's time
	expectNoTick(t, stopped)
	timer.mu.Lock()
	left := len(timer.pending)
	timer.mu.Unlock()
	if left != 1 {
		t.Errorf("%d entries pending, want the running ticker's alone", left)
	}
}

func TestATickerSoonerThanEverythingWakesTheTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	timer := runTimer(t, clk)
	q := timer.Queue(workqueue.TypedQueueConfig[string]{})
	q.AddAfter("in-an-hour", time.Hour)
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return clk.HasWaiters(), "the timer waits for nothing"
	})
	ch, tick := ticks(clk)
	timer.Every(time.Second, tick)
	// The timer waited for the hour: once it took the news in, it reads the
	// clock before it waits again, whichever timer it was on at the step.
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return len(timer.wake) == 0, "the timer has not taken the ticker in"
	})
	clk.Step(time.Second)
	expectTick(t, ch, t0.Add(time.Second))
	if q.Len() != 0 {
		t.Errorf("the queue holds %d items an hour early", q.Len())
	}
}
