package slurmenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// start runs one of the cluster's daemons in the foreground, so that it dies with
// us (internal/lab/spawn) and we see when it exits, its output appended to log. The
// environment carries SLURM_CONF, which also marks the daemon's descendants as
// ours for Stop.
func (e *Env) start(log string, name string, args ...string) (*spawn.Process, error) {
	cmd := exec.Command(e.bins[name], args...)
	cmd.Dir = e.Dir
	cmd.Env = e.Environ()
	d, err := spawn.StartLogged(name, log, cmd)
	if err != nil {
		return nil, fmt.Errorf("slurmenv: %w", err)
	}
	return d, nil
}

// tailLines is how much of a daemon's log an error message quotes.
const tailLines = 40

// permanentError is a readiness check's way of saying that waiting longer is no use.
type permanentError struct{ error }

// waitFor polls ready every 100ms until it returns nil or a permanentError, the
// daemon exits, or startTimeout passes.
func waitFor(ctx context.Context, d *spawn.Process, what string, ready func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		last = ready(ctx)
		if last == nil {
			return true, nil
		}
		if errors.As(last, new(permanentError)) {
			return false, fmt.Errorf("slurmenv: %s: not %s: %w: %s", d.Name, what, last, d.Tail(tailLines))
		}
		select {
		case <-d.Done():
			return false, fmt.Errorf("slurmenv: %s exited (%v) before %s: %s", d.Name, d.Err(), what, d.Tail(tailLines))
		default:
			return false, nil
		}
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("slurmenv: %s: not %s (%v): %w: %s", d.Name, what, last, err, d.Tail(tailLines))
	}
	return err
}

// killLeftovers kills the job steps' processes: every process whose environment has
// our SLURM_CONF (slurmstepd inherits it from slurmd, jobs from sbatch), every
// conmon of our podman storage (a job killed while podman started a container
// leaves it running), and all their descendants, which may have dropped both. Without slurmd and slurmctld, slurmstepd
// would only wait to report, so there is no point in asking politely.
func (e *Env) killLeftovers() error {
	var pids []int
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		var err error
		if pids, err = e.leftovers(); err != nil || len(pids) == 0 {
			return true, err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("slurmenv: processes %v survive SIGKILL", pids)
	}
	return err
}

// leftovers lists the processes killLeftovers ends.
func (e *Env) leftovers() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	marker := []byte("SLURM_CONF=" + e.Conf + "\x00")
	var storage []byte
	if e.podmanStorage != "" {
		storage = []byte(e.podmanStorage + "/")
	}
	children := map[int][]int{}
	var roots []int
	self := os.Getpid()
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
		if env, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "environ")); err == nil && bytes.Contains(env, marker) {
			roots = append(roots, pid)
		} else if storage != nil {
			// A container's conmon, which daemonizes away from its job and
			// scrubs its environment, names the storage in its arguments.
			if cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline")); err == nil && bytes.Contains(cmdline, storage) {
				roots = append(roots, pid)
			}
		}
	}
	seen := map[int]bool{}
	var pids []int
	for len(roots) > 0 {
		pid := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if !isZombie(pid) {
			pids = append(pids, pid)
		}
		roots = append(roots, children[pid]...)
	}
	return pids, nil
}

// parentOf reads the parent's pid from /proc/PID/stat; 0 if the process is gone.
func parentOf(pid int) int {
	f, ok := stat(pid)
	if !ok || len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func isZombie(pid int) bool {
	f, ok := stat(pid)
	return !ok || f[0] == "Z"
}

// stat returns the fields of /proc/PID/stat after the command name, which may
// itself hold spaces and parentheses: state, ppid, ...
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) > 0
}
