package mock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// container returns the pod record and its container (regular or init) named
// container, or a NotFound error. init tells which kind it is.
func (p *Provider) container(namespace, name, container string) (rec *podRecord, c *corev1.Container, init bool, now time.Time, err error) {
	p.mu.Lock()
	now = p.clock.Now()
	rec = p.lookupLocked(providerutil.PodKey(namespace, name), now)
	p.mu.Unlock()
	if rec == nil {
		return nil, nil, false, now, providerutil.PodNotFound("mock", namespace, name)
	}
	pod := rec.pod()
	for kind, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == container {
				return rec, &cs[i], kind == 1, now, nil
			}
		}
	}
	return nil, nil, false, now, errdefs.NotFound("mock: container %s/%s/%s not found", namespace, name, container)
}

// runningContainer is container for a container that must be running now (a regular
// container or a sidecar of a running pod); otherwise it returns an InvalidInput error.
func (p *Provider) runningContainer(namespace, name, container string) error {
	rec, c, init, now, err := p.container(namespace, name, container)
	if err != nil {
		return err
	}
	if !rec.runningAt(now) {
		return errdefs.InvalidInput("mock: container %s/%s/%s is waiting to start: ContainerCreating", namespace, name, container)
	}
	if init && !isSidecar(*c) {
		return errdefs.InvalidInput("mock: container %s/%s/%s is not running: it has completed", namespace, name, container)
	}
	return nil
}

// GetContainerLogs returns the scripted log of the container: its args (or its command
// if it has no args), one per line, line i written at the pod's start time plus i
// seconds. See logLines for how the options apply. With Follow the stream stays open,
// with nothing more to read, until ctx ends or it is closed.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	rec, c, _, now, err := p.container(namespace, name, container)
	if err != nil {
		return nil, err
	}
	if !rec.runningAt(now) {
		return nil, errdefs.InvalidInput("mock: container %s/%s/%s is waiting to start: ContainerCreating", namespace, name, container)
	}
	if opts.Previous {
		// The mock never restarts a container.
		return nil, errdefs.InvalidInput("mock: previous terminated container %s/%s/%s not found", namespace, name, container)
	}
	data, limited := logLines(c, rec.running.Time(), now, opts)
	if opts.Follow && !limited {
		return newFollowReader(ctx, data), nil
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// logLines renders the log of container c, started at start, as of now: the lines
// since SinceTime and SinceSeconds (the later of both, inclusive), then the last Tail
// of those, each prefixed with its RFC3339Nano timestamp and a space with Timestamps,
// and the result cut to LimitBytes. It reports whether LimitBytes was reached, which
// ends a followed log.
func logLines(c *corev1.Container, start, now time.Time, opts provider.ContainerLogOpts) ([]byte, bool) {
	lines := c.Args
	if len(lines) == 0 {
		lines = c.Command
	}
	var since time.Time
	if opts.SinceSeconds > 0 {
		since = now.Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if opts.SinceTime != nil && opts.SinceTime.After(since) {
		since = *opts.SinceTime
	}
	type line struct {
		at   time.Time
		text string
	}
	var kept []line
	for i, text := range lines {
		at := start.Add(time.Duration(i) * time.Second)
		if at.Before(since) {
			continue
		}
		kept = append(kept, line{at, text})
	}
	if opts.TailSet && opts.Tail < len(kept) {
		kept = kept[len(kept)-max(opts.Tail, 0):]
	}
	var b bytes.Buffer
	for _, l := range kept {
		if opts.Timestamps {
			b.WriteString(l.at.UTC().Format(time.RFC3339Nano))
			b.WriteByte(' ')
		}
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	data := b.Bytes()
	if opts.LimitBytes > 0 && int64(len(data)) >= opts.LimitBytes {
		return data[:opts.LimitBytes], true
	}
	return data, false
}

// followReader reads its data, then blocks until its context ends or it is closed,
// and then reports EOF: a followed log to which nothing more is written.
type followReader struct {
	ctx    context.Context
	data   *bytes.Reader
	closed chan struct{}
	once   sync.Once
}

func newFollowReader(ctx context.Context, data []byte) *followReader {
	return &followReader{ctx: ctx, data: bytes.NewReader(data), closed: make(chan struct{})}
}

func (r *followReader) Read(b []byte) (int, error) {
	if r.data.Len() > 0 {
		return r.data.Read(b)
	}
	select {
	case <-r.ctx.Done():
	case <-r.closed:
	}
	return 0, io.EOF
}

func (r *followReader) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

// RunInContainer runs the mock's script for cmd. For a pod given resolved
// (CreateResolvedPod), `env` prints the container's resolved environment, one
// NAME=value per line, and `cat /mount/path/file` prints a file of a volume the
// container mounts (exit code 1 and an error on stderr if there is none). Otherwise
// it writes cmd joined by spaces and a
// newline to stdout, then copies stdin, if given, to stdout until EOF. A command
// "exit N" (or "sh -c 'exit N'") then fails with an *provider.ExecError of code N.
// With a TTY the output still goes to stdout. If ctx ends first, it returns ctx.Err().
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach provider.AttachIO) error {
	if err := p.runningContainer(namespace, name, container); err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("mock: exec in %s/%s/%s: empty command", namespace, name, container)
	}
	p.mu.Lock()
	rec := p.pods[providerutil.PodKey(namespace, name)]
	p.mu.Unlock()
	var rp *provider.ResolvedPod
	if rec != nil && rec.resolved {
		rp = rec.resolution.withPod(rec) // records never change once stored
	}
	out, scripted, outErr := scriptedOutput(rp, container, cmd)
	code := exitCode(cmd)
	err := runSession(ctx, attach, func(stdin io.Reader, stdout io.Writer) error {
		if scripted {
			return writeScripted(stdout, attach, out, outErr)
		}
		if _, err := io.WriteString(stdout, strings.Join(cmd, " ")+"\n"); err != nil {
			return err
		}
		if stdin != nil {
			if _, err := io.Copy(stdout, stdin); err != nil {
				return err
			}
		}
		if code != 0 {
			return &provider.ExecError{ExitCode: code}
		}
		return nil
	})
	var exitErr *provider.ExecError
	if err == nil || errors.As(err, &exitErr) || err == ctx.Err() {
		return err
	}
	return fmt.Errorf("mock: exec in %s/%s/%s: %w", namespace, name, container, err)
}

// exitCode returns N for a command "exit N" or "sh -c 'exit N'", 0 otherwise.
func exitCode(cmd []string) int {
	words := cmd
	if len(cmd) == 3 && cmd[1] == "-c" && (cmd[0] == "sh" || cmd[0] == "/bin/sh" || cmd[0] == "bash" || cmd[0] == "/bin/bash") {
		words = strings.Fields(cmd[2])
	}
	if len(words) != 2 || words[0] != "exit" {
		return 0
	}
	n, err := strconv.Atoi(words[1])
	if err != nil {
		return 0
	}
	return n & 0xff // as a shell would
}

// AttachToContainer copies stdin, if given, to stdout until EOF or until ctx ends: the
// main process of a mock container is an echo. Without stdin it waits for ctx.
func (p *Provider) AttachToContainer(ctx context.Context, namespace, name, container string, attach provider.AttachIO) error {
	if err := p.runningContainer(namespace, name, container); err != nil {
		return err
	}
	err := runSession(ctx, attach, func(stdin io.Reader, stdout io.Writer) error {
		if stdin == nil {
			<-ctx.Done()
			return nil
		}
		_, err := io.Copy(stdout, stdin)
		return err
	})
	if ctx.Err() != nil {
		return nil // the client left: a normal end of an attach
	}
	if err != nil {
		return fmt.Errorf("mock: attach to %s/%s/%s: %w", namespace, name, container, err)
	}
	return nil
}

// runSession runs script with the session's streams (a nil stdout discards) and
// returns its result, or ctx.Err() if ctx ends first. Terminal resizes are read and
// ignored. The script goroutine may outlive the call while a read of stdin blocks: it
// ends when the caller closes the streams.
func runSession(ctx context.Context, attach provider.AttachIO, script func(stdin io.Reader, stdout io.Writer) error) error {
	var stdin io.Reader
	var stdout io.Writer = io.Discard
	var resize <-chan provider.TermSize
	if attach != nil {
		if in := attach.Stdin(); in != nil {
			stdin = in
		}
		if out := attach.Stdout(); out != nil {
			stdout = out
		}
		resize = attach.Resize()
	}
	done := make(chan error, 1)
	go func() { done <- script(stdin, stdout) }()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-resize:
			if !ok {
				resize = nil
			}
		}
	}
}

// PortForward echoes: every byte read from stream is written back to it, until EOF,
// an error of the stream, or the end of ctx. Any port of a running pod is accepted.
func (p *Provider) PortForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	p.mu.Lock()
	now := p.clock.Now()
	rec := p.lookupLocked(providerutil.PodKey(namespace, name), now)
	p.mu.Unlock()
	if rec == nil {
		return providerutil.PodNotFound("mock", namespace, name)
	}
	if !rec.runningAt(now) {
		return errdefs.InvalidInput("mock: port-forward to %s/%s: the pod is not running", namespace, name)
	}
	if port <= 0 || port > 65535 {
		return errdefs.InvalidInput("mock: port-forward to %s/%s: invalid port %d", namespace, name, port)
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := stream.Read(buf)
			if n > 0 {
				if _, werr := stream.Write(buf[:n]); werr != nil {
					done <- werr
					return
				}
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) {
			return nil
		}
		return fmt.Errorf("mock: port-forward to %s/%s:%d: %w", namespace, name, port, err)
	case <-ctx.Done():
		return nil
	}
}
