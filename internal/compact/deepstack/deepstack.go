// Package deepstack runs short functions that need a deep stack on one goroutine the
// process keeps, so that the callers, often goroutines that live for one pod
// sync, do not grow stacks of their own for them.
//
// S2 compression (podpack, tokenpack) keeps a 64 KiB hash table on the stack.
// Called on a fresh goroutine, it doubles that goroutine's stack to 128 KiB,
// which costs a copy and stays until the goroutine ends or the collector
// shrinks it. A node agent starting pods runs hundreds of sync goroutines at
// once: packing on them held 29 MiB of stacks, against 6 MiB when the packs ran
// aside. The hand-over costs less than the growth it saves (podpack's
// BenchmarkPackAsideOnANewGoroutine).
//
// The goroutine starts on first use and lives as long as the process
// (internal/lab/testenv/leakcheck knows it by its function, serve). Functions run
// one at a time, so they must be short and must not call Do themselves.
package deepstack

import "sync"

// request is a function to run and the channel to report its end on.
type request struct {
	f    func()
	done chan<- struct{}
}

// requests starts the goroutine on first use.
var requests = sync.OnceValue(func() chan<- request {
	c := make(chan request)
	go serve(c)
	return c
})

// serve is the goroutine the functions run on.
func serve(c <-chan request) {
	for r := range c {
		r.f()
		r.done <- struct{}{}
	}
}

// dones holds the channels Do waits on, one buffered slot each.
var dones = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// Do runs f on the process's aside goroutine and returns when f has. f must not
// panic: it would end the process, as on any goroutine.
func Do(f func()) {
	done := dones.Get().(chan struct{})
	requests() <- request{f: f, done: done}
	<-done
	dones.Put(done)
}
