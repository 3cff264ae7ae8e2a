package spawn

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a child started by StartLogged: a daemon of a test or local
// environment whose output goes to a log file, read back for error messages.
type Process struct {
	Name string
	Log  string // the file its stdout and stderr are appended to
	Cmd  *exec.Cmd

	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// StartLogged starts cmd as Start does, with its output appended to log.
func StartLogged(name, log string, cmd *exec.Cmd) (*Process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child has its own copy of the descriptor once started.
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := Start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: log, Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit status, once Done is closed.
func (p *Process) Err() error { return p.err }

// Running reports whether the process was started (p is not nil) and has not
// exited.
func (p *Process) Running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the process's group, and SIGKILL if it has not exited
// after grace. It does nothing to a process that is not running.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Tail is the last n lines of the process's log, for error messages.
func (p *Process) Tail(n int) string {
	f, err := os.Open(p.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
