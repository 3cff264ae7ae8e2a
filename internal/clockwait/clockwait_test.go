package clockwait

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// The tests run in a synctest bubble, so that synctest.Wait says when Until is
// waiting on the fake clock: nothing moves but what the test steps.

// Until calls the condition at once, then after each delay of the back-off on
// the clock, not sooner, and goes on at the cap until the condition holds.
func TestUntilWaitsEachDelayOnTheClockAndGoesOnAtTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		b := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 4 * time.Second, Steps: math.MaxInt32}
		calls := 0
		done := make(chan error, 1)
		go func() {
			done <- Until(context.Background(), clk, b, func(context.Context) (bool, error) {
				calls++
				return calls == 6, nil
			})
		}()
		synctest.Wait()
		if calls != 1 {
			t.Fatalf("%d calls before any wait, want 1", calls)
		}
		for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second} {
			clk.Step(d - time.Nanosecond)
			synctest.Wait()
			if calls != i+1 {
				t.Fatalf("wait %d: %d calls a nanosecond before its %s were over, want %d", i+1, calls, d, i+1)
			}
			clk.Step(time.Nanosecond)
			synctest.Wait()
			if calls != i+2 {
				t.Fatalf("wait %d: %d calls once its %s were over, want %d", i+1, calls, d, i+2)
			}
		}
		if err := <-done; err != nil {
			t.Errorf("Until = %v, want nil once the condition holds", err)
		}
		if clk.HasWaiters() {
			t.Error("a timer is left on the clock")
		}
	})
}

// The condition's error ends Until at once, and is what it returns.
func TestUntilReturnsTheConditionsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		refused := errors.New("refused")
		calls := 0
		err := Until(context.Background(), clk, wait.Backoff{Duration: time.Second}, func(context.Context) (bool, error) {
			calls++
			return false, refused
		})
		if !errors.Is(err, refused) || calls != 1 {
			t.Errorf("Until = %v after %d calls, want the condition's error after 1", err, calls)
		}
	})
}

// A context that ends while Until waits ends it, with the context's error.
func TestUntilStopsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Until(ctx, clk, wait.Backoff{Duration: time.Second}, func(context.Context) (bool, error) { return false, nil })
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Until = %v, want context.Canceled", err)
		}
		if clk.HasWaiters() {
			t.Error("a timer is left on the clock")
		}
	})
}

// The first call is made even if the context has ended, as in wait's loops.
func TestUntilCallsOnceWhenTheContextHasEnded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := Until(ctx, clk, wait.Backoff{Duration: time.Second}, func(context.Context) (bool, error) {
		calls++
		return false, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("Until = %v after %d calls, want context.Canceled after 1", err, calls)
	}
}
