package kubeletapi

import (
	"context"
	"errors"
	"io"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/vkubelet/vkubelet/provider"
)

// attachIO carries one session's streams to the provider.
type attachIO struct {
	stdin          io.Reader
	stdout, stderr io.WriteCloser
	tty            bool
	resize         chan provider.TermSize
}

func (a *attachIO) Stdin() io.Reader                 { return a.stdin }
func (a *attachIO) Stdout() io.WriteCloser           { return a.stdout }
func (a *attachIO) Stderr() io.WriteCloser           { return a.stderr }
func (a *attachIO) TTY() bool                        { return a.tty }
func (a *attachIO) Resize() <-chan provider.TermSize { return a.resize }

// newAttachIO adapts the streaming library's streams. Interfaces holding nil
// pointers become plain nil, so a provider can test "stdin == nil".
func newAttachIO(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) *attachIO {
	a := &attachIO{tty: tty, resize: make(chan provider.TermSize, 1)}
	if in != nil {
		a.stdin = in
	}
	if out != nil {
		a.stdout = out
	}
	if errw != nil {
		a.stderr = errw
	}
	go func() {
		defer close(a.resize)
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-resize:
				if !ok {
					return
				}
				select {
				case a.resize <- provider.TermSize{Width: sz.Width, Height: sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return a
}

type execAdapter struct {
	ns string
	p  provider.ContainerExecProvider
}

func (e execAdapter) ExecInContainer(ctx context.Context, pod, _ string, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := e.p.RunInContainer(ctx, e.ns, pod, container, cmd, newAttachIO(ctx, in, out, errw, tty, resize))
	var exitErr *provider.ExecError
	if errors.As(err, &exitErr) {
		// The streaming library reports the exit code to kubectl for this type.
		return utilexec.CodeExitError{Err: err, Code: exitErr.ExitCode}
	}
	return err
}

type attachAdapter struct {
	ns string
	p  provider.ContainerAttachProvider
}

func (a attachAdapter) AttachContainer(ctx context.Context, pod, _ string, container string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return a.p.AttachToContainer(ctx, a.ns, pod, container, newAttachIO(ctx, in, out, errw, tty, resize))
}

type portForwardAdapter struct {
	ns string
	p  provider.PortForwardProvider
}

func (f portForwardAdapter) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	return f.p.PortForward(ctx, f.ns, pod, port, stream)
}
