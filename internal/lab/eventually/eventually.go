// Package eventually is how a test waits for what other goroutines do: it polls a
// condition until a deadline, or takes a value from a channel within one, and fails
// the test with the condition's last description. It never sleeps a fixed time in
// the hope that something happened meanwhile. It imports only the standard library,
// so that the unit tests of any package can use it; testenv.Eventually, for the
// integration tests, is True.
package eventually

import (
	"testing"
	"time"
)

// Interval is how often True polls: the pace of a condition read from an API server.
const Interval = 100 * time.Millisecond

// True polls cond every Interval until it returns true; once timeout has passed, it
// fails t with the last description cond gave.
func True(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	TrueEvery(t, timeout, Interval, cond)
}

// TrueEvery is True polling every interval: a condition read from memory can be
// polled every millisecond.
func TrueEvery(t testing.TB, timeout, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %s", timeout, desc)
			return
		}
		time.Sleep(interval) // between two polls
	}
}

// Never polls cond every interval for d and fails t, with cond's description, the
// first time it returns true: for what must not happen in a given time.
func Never(t testing.TB, d, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if bad, desc := cond(); bad {
			t.Fatalf("happened within %s: %s", d, desc)
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(interval) // between two polls
	}
}

// Receive returns the next value from ch, failing t, naming what it waited for, if
// none comes within timeout.
func Receive[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: not within %s", what, timeout)
		panic("unreachable")
	}
}
