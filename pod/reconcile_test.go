package pod

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

func TestRestartReconcileDeletesProviderPodsTheAPIForgot(t *testing.T) {
	f := newFixture(t, newPod("kept"))
	f.provider.pods["ns/kept"] = newPod("kept")
	f.provider.pods["ns/orphan"] = newPod("orphan")
	f.start()
	if got := f.c.deleteQueue.Len(); got != 1 {
		t.Fatalf("delete queue has %d items, want the orphan", got)
	}
	if err := f.c.deleteHandler(f.ctx, "ns/orphan"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncHandler(f.ctx, "ns/kept"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.provider.callList(), ",")
	if got != "DeletePod ns/orphan" {
		t.Fatalf("provider calls after restart = %s; want only the orphan deleted and nothing created twice", got)
	}
}

// A provider that cannot list its pods at start is asked again, after a back-off
// on the controller's clock (500ms, then 1s, each up to 20% longer), until it
// answers.
func TestListingTheProvidersPodsAtStartIsRetriedWithBackOff(t *testing.T) {
	f := newFixture(t)
	f.start()
	f.provider.mu.Lock()
	f.provider.getPodsFailures, f.provider.getPodsCalls = 2, 0
	f.provider.mu.Unlock()
	listings := func() int {
		f.provider.mu.Lock()
		defer f.provider.mu.Unlock()
		return f.provider.getPodsCalls
	}
	done := make(chan error, 1)
	go func() { done <- f.c.reconcileProvider(f.ctx) }()
	for i, d := range []time.Duration{500 * time.Millisecond, time.Second} {
		eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
			n := listings()
			return n == i+1 && f.clock.HasWaiters(), fmt.Sprintf("%d listings, back-off waiting: %v; want %d and a back-off", n, f.clock.HasWaiters(), i+1)
		})
		f.clock.Step(d - time.Nanosecond)
		if !f.clock.HasWaiters() {
			t.Fatalf("back-off %d ended before its %s", i+1, d)
		}
		f.clock.Step(d/5 + time.Nanosecond) // the most the jitter adds
	}
	if err := eventually.Receive(t, done, 5*time.Second, "the reconcile after two failed listings"); err != nil {
		t.Fatal(err)
	}
	if n := listings(); n != 3 {
		t.Errorf("%d listings, want 3 (two failed, then one answered)", n)
	}
}
