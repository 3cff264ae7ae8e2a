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
