package providerutil

import (
	"context"
	"errors"

	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/vkubelet/vkubelet/provider"
)

// StreamOptions turns an exec or attach session into client-go's remotecommand
// options, for providers that forward a session to another streaming server (a
// runtime's, another API server's). A terminal has no separate stderr; terminal size
// changes are forwarded until ctx ends.
func StreamOptions(ctx context.Context, attach provider.AttachIO) remotecommand.StreamOptions {
	opts := remotecommand.StreamOptions{Tty: attach.TTY()}
	if in := attach.Stdin(); in != nil {
		opts.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		opts.Stdout = out
	}
	if errw := attach.Stderr(); errw != nil && !attach.TTY() {
		opts.Stderr = errw
	}
	if attach.TTY() && attach.Resize() != nil {
		opts.TerminalSizeQueue = sizeQueue{ctx: ctx, ch: attach.Resize()}
	}
	return opts
}

// ExecResult maps the error of a forwarded exec to the contract's: a command that
// exited non-zero becomes a *provider.ExecError with its code.
func ExecResult(err error) error {
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return &provider.ExecError{ExitCode: exitErr.ExitStatus()}
	}
	return err
}

// sizeQueue adapts AttachIO.Resize to remotecommand.TerminalSizeQueue.
type sizeQueue struct {
	ctx context.Context
	ch  <-chan provider.TermSize
}

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case <-q.ctx.Done():
		return nil
	case s, ok := <-q.ch:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	}
}
