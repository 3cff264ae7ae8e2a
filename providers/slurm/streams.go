package slurm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/providerutil/crilog"
)

// container finds a container of a pod and its recorded instances.
func (p *Provider) container(namespace, name, container string) (rec *record, jobID string, ins []instance, err error) {
	rec, err = p.lookup(namespace, name)
	if err != nil {
		return nil, "", nil, err
	}
	p.mu.Lock()
	pod, jobID := rec.pod, rec.jobID
	p.mu.Unlock()
	for _, c := range containers(pod) {
		if c.Name == container {
			return rec, jobID, readInstances(rec.dir, container), nil
		}
	}
	return nil, "", nil, errdefs.InvalidInput("slurm: pod %s/%s has no container %s", namespace, name, container)
}

// GetContainerLogs reads the log file the container's current instance (or, with
// Previous, the one before) wrote.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	rec, _, ins, err := p.container(namespace, name, container)
	if err != nil {
		return nil, err
	}
	// An instance waiting to start (a restart's back-off) has no log yet: the
	// kubelet shows the last one that ran.
	n := len(ins) - 1
	for n >= 0 && ins[n].started.IsZero() {
		n--
	}
	if opts.Previous {
		if n == len(ins)-1 {
			n--
		}
		if n < 0 {
			return nil, errdefs.InvalidInput("slurm: previous terminated container %s in pod %s/%s not found", container, namespace, name)
		}
	}
	if n < 0 {
		return nil, errdefs.InvalidInput("slurm: container %s in pod %s/%s is waiting to start", container, namespace, name)
	}
	dir := filepath.Join(rec.dir, containerDir, container, strconv.Itoa(n))
	running := func(context.Context) bool {
		if _, err := os.Stat(filepath.Join(dir, "exit")); err == nil {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		cur := p.pods[providerutil.PodKey(namespace, name)]
		return cur == rec && (rec.status == nil || (rec.status.Phase != corev1.PodSucceeded && rec.status.Phase != corev1.PodFailed))
	}
	follow := opts.Follow && !opts.Previous && running(ctx)
	logFile := filepath.Join(dir, "log")
	if follow {
		// The script records the start before podman has made the log file:
		// a follower waits for it, as it would for the next line.
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := os.Stat(logFile)
			return !errors.Is(err, os.ErrNotExist) || !running(ctx), nil
		})
		if err != nil {
			return nil, err
		}
	}
	r, err := crilog.Open(ctx, logFile, opts, follow, running)
	if errors.Is(err, os.ErrNotExist) {
		return io.NopCloser(bytes.NewReader(nil)), nil // started, nothing written yet
	}
	return r, err
}

// inJob returns the start of a command that runs podman on the running
// container's node: srun --overlap starts a step in the job's allocation, beside
// the containers, with a terminal when the session has one. It also returns the
// container's podman name.
func (p *Provider) inJob(namespace, name, container string, tty bool) (args []string, ctr string, err error) {
	rec, jobID, ins, err := p.container(namespace, name, container)
	if err != nil {
		return nil, "", err
	}
	if len(ins) == 0 || ins[len(ins)-1].started.IsZero() || ins[len(ins)-1].exited {
		return nil, "", errdefs.InvalidInput("slurm: container %s in pod %s/%s is not running", container, namespace, name)
	}
	args = []string{"--overlap", "--jobid=" + jobID, "--nodes=1", "--ntasks=1", "--quiet"}
	if tty {
		args = append(args, "--pty")
	}
	return append(args, p.cfg.Podman...), containerName(rec.pod, container), nil
}

// RunInContainer runs cmd in the container with podman exec, on the job's node.
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach provider.AttachIO) error {
	args, ctr, err := p.inJob(namespace, name, container, attach.TTY())
	if err != nil {
		return err
	}
	args = append(args, "exec")
	if attach.Stdin() != nil {
		args = append(args, "--interactive")
	}
	if attach.TTY() {
		args = append(args, "--tty")
	}
	args = append(append(args, ctr), cmd...)
	return runAttached(ctx, p.cli.command(ctx, "srun", args...), attach)
}

// AttachToContainer attaches to the container's main process, as kubectl attach
// does: podman attach on the job's node until the session ends. Stdin reaches
// the process only if its container has stdin: true.
func (p *Provider) AttachToContainer(ctx context.Context, namespace, name, container string, attach provider.AttachIO) error {
	args, ctr, err := p.inJob(namespace, name, container, attach.TTY())
	if err != nil {
		return err
	}
	args = append(args, "attach", "--sig-proxy=false")
	if attach.Stdin() == nil {
		args = append(args, "--no-stdin")
	}
	err = runAttached(ctx, p.cli.command(ctx, "srun", append(args, ctr)...), attach)
	if ctx.Err() != nil {
		return nil // the caller ended the session
	}
	return err
}

// runAttached runs c with the session's streams: through a pseudo-terminal when
// the session has one (srun --pty wants a terminal of its own), through pipes
// otherwise. srun's own messages ("srun: error: … Exited with exit code 3") are
// kept out of the session's stderr; the exit code says it.
func runAttached(ctx context.Context, c *exec.Cmd, attach provider.AttachIO) error {
	if attach.TTY() {
		return runInTerminal(ctx, c, attach)
	}
	if in := attach.Stdin(); in != nil {
		c.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		c.Stdout = out
	}
	var filter *srunFilter
	if errw := attach.Stderr(); errw != nil {
		filter = &srunFilter{w: errw}
		c.Stderr = filter
	}
	err := c.Run()
	if filter != nil {
		filter.flush()
	}
	return execResult(err)
}

// execResult turns the command's end into the provider contract's answer.
func execResult(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return &provider.ExecError{ExitCode: exit.ExitCode()}
	}
	return err
}

// srunFilter passes stderr through, line by line, without srun's own lines.
type srunFilter struct {
	w    io.Writer
	line []byte
}

func (f *srunFilter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.line = append(f.line, b...)
			break
		}
		f.line = append(f.line, b[:i+1]...)
		b = b[i+1:]
		if err := f.flush(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (f *srunFilter) flush() error {
	line := f.line
	f.line = f.line[:0]
	if len(line) == 0 || bytes.HasPrefix(line, []byte("srun: ")) {
		return nil
	}
	_, err := f.w.Write(line)
	return err
}
