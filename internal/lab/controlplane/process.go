package controlplane

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// process is one running component.
type process struct{ *spawn.Process }

// startProcess runs bin with args, logging to <dir>/<name>.log. The child gets its own
// process group (so Stop can signal everything it forked) and SIGKILL when this
// process dies (package spawn), so a killed parent leaves no orphan behind.
func startProcess(dir, name, bin string, args ...string) (*process, error) {
	p, err := spawn.StartLogged(name, filepath.Join(dir, name+".log"), exec.Command(bin, args...))
	if err != nil {
		return nil, err
	}
	return &process{p}, nil
}

// running reports whether the process has not exited yet.
func (p *process) running() bool { return p.Running() }

// failure describes an unexpected exit, with the end of the component's log.
func (p *process) failure() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.Name, p.Err(), p.Log, p.Tail(25))
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	p.Stop(grace)
	// Children of the component, if any, must not outlive it.
	if err := syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s process group: %w", p.Name, err)
	}
	return nil
}
