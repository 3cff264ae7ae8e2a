package testenv

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Copies watches, in a provider's own back end, which pods of one name run: the
// "at most one copy" tests (ReplaceStatefulSetPod) read there, not in the API,
// whether a pod ran beside an earlier pod of its name.
type Copies struct {
	running func() ([]types.UID, error)
	done    chan struct{}
	stopped chan struct{}
	ending  sync.Once

	mu      sync.Mutex
	order   []types.UID        // pods in the order first seen running
	beside  map[types.UID]bool // pods seen running beside one seen before
	polls   int
	both    int // reads that saw two pods running
	failed  int // reads that failed
	lastErr error
}

// WatchCopies calls running every 50 ms, until Stop or the end of the test, to
// read which pods of a name run in the back end at that moment (by UID).
func WatchCopies(t testing.TB, running func() ([]types.UID, error)) *Copies {
	w := &Copies{running: running, done: make(chan struct{}), stopped: make(chan struct{}), beside: map[types.UID]bool{}}
	go func() {
		defer close(w.stopped)
		for {
			select {
			case <-w.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			uids, err := w.running()
			w.record(uids, err)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *Copies) record(running []types.UID, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		w.failed++
		w.lastErr = err
		return
	}
	running = slices.Compact(slices.Sorted(slices.Values(running)))
	for _, uid := range running {
		if !slices.Contains(w.order, uid) {
			w.order = append(w.order, uid)
		}
	}
	if len(running) < 2 {
		return
	}
	w.both++
	first := slices.IndexFunc(w.order, func(uid types.UID) bool { return slices.Contains(running, uid) })
	for _, uid := range running {
		if uid != w.order[first] {
			w.beside[uid] = true
		}
	}
}

// Stop waits until the watch has seen pod uid run (the replacement: the watch
// then covered its start), for up to 3 minutes, and stops it.
func (w *Copies) Stop(t testing.TB, uid types.UID) {
	t.Helper()
	Eventually(t, 3*time.Minute, func() (bool, string) {
		return slices.Contains(w.Seen(), uid), fmt.Sprintf("pods seen running %v, want %s among them (%s)", w.Seen(), uid, w)
	})
	w.end()
}

func (w *Copies) end() {
	w.ending.Do(func() { close(w.done) })
	<-w.stopped
}

// Seen are the pods seen running, in the order first seen.
func (w *Copies) Seen() []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.order)
}

// Overlapping is how many pods were seen running beside one seen before.
func (w *Copies) Overlapping() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.beside)
}

// String gives the watch's counts, for a test's log.
func (w *Copies) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d reads, %d with two pods running, %d failed (last: %v)", w.polls, w.both, w.failed, w.lastErr)
}

// ReleaseWhen calls release(true) once cond is true, polled every 100 ms; or
// release(false) after timeout, failing the test with cond's last word, or
// when the test ends first. It returns at once: it is for a test that holds
// something back (a frozen runtime) until the state it wants, while its own
// goroutine waits elsewhere (in ReplaceStatefulSetPod, say). release may fail
// the test with Errorf, not Fatalf.
func ReleaseWhen(t testing.TB, timeout time.Duration, cond func() (bool, string), release func(held bool)) {
	quit := make(chan struct{})
	released := make(chan struct{})
	t.Cleanup(func() { close(quit); <-released })
	go func() {
		defer close(released)
		deadline := time.Now().Add(timeout)
		for {
			ok, why := cond()
			if ok {
				release(true)
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("not within %s: %s", timeout, why)
				release(false)
				return
			}
			select {
			case <-quit:
				release(false)
				return
			case <-time.After(100 * time.Millisecond): // between two polls
			}
		}
	}()
}
