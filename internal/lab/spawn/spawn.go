// Package spawn starts child processes that must die with this process.
//
// Linux delivers a child's parent-death signal (Pdeathsig) when the *thread* that
// forked it exits, not the process. Go may end an OS thread whenever a goroutine
// that locked it (runtime.LockOSThread) returns, so a child forked from an ordinary
// goroutine can be killed at a random moment. Start forks every child from one
// goroutine locked to its thread for the life of the process.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests chan request
)

// Start starts cmd in its own process group with SIGKILL as its parent-death
// signal, so that neither a signal to our group nor our death leaves it behind.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as we do
			for r := range requests {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := request{cmd: cmd, done: make(chan error, 1)}
	requests <- r
	return <-r.done
}
