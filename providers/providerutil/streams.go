package providerutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
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

// DialPortForward connects, with SPDY and the port-forward protocol, to a
// port-forward endpoint: a runtime's streaming server, or pods/portforward of an
// API server; config says how to reach it (TLS, credentials).
func DialPortForward(config *rest.Config, u *url.URL) (httpstream.Connection, error) {
	transport, upgrader, err := spdy.RoundTripperFor(config)
	if err != nil {
		return nil, err
	}
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name)
	return conn, err
}

// PortForwardStreams opens on conn the two streams of one connection forwarded to
// port, with the headers a port-forward server reads (stream type, port, request
// ID). The error stream is only the server's to write: it is closed for writing
// and read to its end in the background; remoteErr then delivers the server's
// message as an error, or nil if it had none.
func PortForwardStreams(conn httpstream.Connection, port int32) (data httpstream.Stream, remoteErr <-chan error, err error) {
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return nil, nil, err
	}
	_ = errStream.Close() // we never write to it
	errCh := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil:
			errCh <- err
		case len(msg) > 0:
			errCh <- fmt.Errorf("port-forward to port %d: %s", port, msg)
		default:
			errCh <- nil
		}
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err = conn.CreateStream(headers)
	if err != nil {
		return nil, nil, err
	}
	return data, errCh, nil
}
