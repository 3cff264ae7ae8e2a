package eventually

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that notes a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	TrueEvery(r, time.Minute, time.Millisecond, func() (bool, string) { return n.Add(1) == 3, "" })
	if r.failed != "" || n.Load() != 3 {
		t.Fatalf("polled %d times, failure %q; want 3 polls and no failure", n.Load(), r.failed)
	}
}

func TestTrueFailsWithTheLastDescription(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	TrueEvery(r, 0, time.Millisecond, func() (bool, string) { return false, fmt.Sprint("poll ", n.Add(1)) })
	if want := "condition not met after 0s: poll 1"; r.failed != want {
		t.Fatalf("failure %q, want %q", r.failed, want)
	}
}

func TestNeverFailsWhenTheConditionHappens(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	Never(r, time.Minute, time.Millisecond, func() (bool, string) { return n.Add(1) == 2, "second poll" })
	if want := "happened within 1m0s: second poll"; r.failed != want {
		t.Fatalf("failure %q, want %q", r.failed, want)
	}
	r = &recorder{TB: t}
	Never(r, 0, time.Millisecond, func() (bool, string) { return false, "" })
	if r.failed != "" {
		t.Fatalf("failure %q for a condition that never held", r.failed)
	}
}

func TestReceiveReturnsTheValueSent(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, ch, time.Minute, "seven"); got != 7 {
		t.Fatalf("Receive = %d, want 7", got)
	}
}
