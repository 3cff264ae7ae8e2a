package fleet

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// startedRun is a node's Run for the pacer's tests: it reports its start on
// started and its readiness when told to, and runs until ctx ends.
type startedRun struct {
	started chan string
	readyOf map[string]chan struct{}
}

func (s *startedRun) run(ctx context.Context, cfg agent.Config, ready func()) error {
	s.started <- cfg.NodeName
	select {
	case <-s.readyOf[cfg.NodeName]:
		ready()
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

func expectStart(t *testing.T, started <-chan string, want string) {
	t.Helper()
	select {
	case got := <-started:
		if got != want {
			t.Fatalf("started %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not start", want)
	}
}

func expectNoStart(t *testing.T, started <-chan string) {
	t.Helper()
	select {
	case got := <-started:
		t.Fatalf("%s started while every slot was held", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestNodesStartAFewAtATime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &startedRun{started: make(chan string, 3), readyOf: map[string]chan struct{}{
		"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{}),
	}}
	run := newPacer(2, clk).pace(s.run)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyCalls := make(chan string, 3)
	for _, name := range []string{"a", "b", "c"} {
		go func() {
			_ = run(ctx, agent.Config{NodeName: name}, func() { readyCalls <- name })
		}()
		if name != "c" {
			expectStart(t, s.started, name)
		}
	}
	expectNoStart(t, s.started)

	close(s.readyOf["b"]) // b's slot is c's
	expectStart(t, s.started, "c")
	if got := <-readyCalls; got != "b" {
		t.Fatalf("ready called for %s, want b", got)
	}
}

func TestNodesStartWhenTheSlotsAreStuck(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &startedRun{started: make(chan string, 4), readyOf: map[string]chan struct{}{
		"stuck": make(chan struct{}), "next": make(chan struct{}), "third": make(chan struct{}), "fourth": make(chan struct{}),
	}}
	run := newPacer(1, clk).pace(s.run)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuckReady := make(chan struct{})
	go func() { _ = run(ctx, agent.Config{NodeName: "stuck"}, func() { close(stuckReady) }) }()
	expectStart(t, s.started, "stuck")
	go func() { _ = run(ctx, agent.Config{NodeName: "next"}, func() {}) }()
	expectNoStart(t, s.started)

	clk.Step(stuckAfter / 2)
	expectNoStart(t, s.started)
	clk.Step(stuckAfter / 2)
	expectStart(t, s.started, "next")

	// Once a slot is given back, the nodes are paced again.
	close(s.readyOf["stuck"])
	<-stuckReady // its slot given back
	go func() { _ = run(ctx, agent.Config{NodeName: "third"}, func() {}) }()
	expectStart(t, s.started, "third")
	go func() { _ = run(ctx, agent.Config{NodeName: "fourth"}, func() {}) }()
	expectNoStart(t, s.started)
}

func TestANodeThatStopsGivesUpItsSlot(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	run := newPacer(1, clk).pace(func(context.Context, agent.Config, func()) error { return context.Canceled })
	for range 3 { // each would wait for the slot the one before kept
		done := make(chan error, 1)
		go func() { done <- run(context.Background(), agent.Config{}, func() {}) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a node waited for the slot of one that had stopped")
		}
	}
}
