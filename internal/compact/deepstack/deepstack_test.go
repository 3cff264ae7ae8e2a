package deepstack

import (
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestDoRunsEachFunctionOnTheOneGoroutineAndWaitsForIt(t *testing.T) {
	var (
		mu  sync.Mutex
		ids = map[string]int{}
	)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ran := false
			Do(func() {
				mu.Lock()
				ids[goroutineID()]++
				mu.Unlock()
				ran = true
			})
			if !ran { // Do returned before f had run
				t.Error("Do returned before its function ran")
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("the functions ran on %d goroutines, want 1: %v", len(ids), ids)
	}
	for _, n := range ids {
		if n != 50 {
			t.Fatalf("%d functions ran, want 50", n)
		}
	}
}

// goroutineID is the caller's goroutine number, from its stack's first line.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
