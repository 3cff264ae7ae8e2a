package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// This file carries the kubelet API's streams over the protocol: logs, exec and
// attach (stdin, stdout, stderr, terminal resizes, the exit code) and port
// forwarding, on both ends.

func logsRequest(namespace, pod, container string, o provider.ContainerLogOpts) *pb.LogsRequest {
	req := &pb.LogsRequest{Namespace: namespace, Pod: pod, Container: container, Tail: int64(o.Tail), TailSet: o.TailSet,
		LimitBytes: o.LimitBytes, Timestamps: o.Timestamps, Follow: o.Follow, Previous: o.Previous, SinceSeconds: o.SinceSeconds}
	if o.SinceTime != nil {
		req.SinceTime = o.SinceTime.Format(time.RFC3339Nano)
	}
	return req
}

func logOpts(req *pb.LogsRequest) (provider.ContainerLogOpts, error) {
	o := provider.ContainerLogOpts{Tail: int(req.GetTail()), TailSet: req.GetTailSet(), LimitBytes: req.GetLimitBytes(),
		Timestamps: req.GetTimestamps(), Follow: req.GetFollow(), Previous: req.GetPrevious(), SinceSeconds: req.GetSinceSeconds()}
	if req.GetSinceTime() != "" {
		t, err := time.Parse(time.RFC3339Nano, req.GetSinceTime())
		if err != nil {
			return o, fmt.Errorf("since_time %q: %w", req.GetSinceTime(), err)
		}
		o.SinceTime = &t
	}
	return o, nil
}

// --- the server's end ---

func (s *Server) Exec(stream grpc.BidiStreamingServer[pb.StreamInput, pb.StreamOutput]) error {
	ep, ok := s.p.(provider.ContainerExecProvider)
	if !ok {
		return status.Error(codes.Unimplemented, "the provider does not exec")
	}
	return serveAttached(stream, func(ctx context.Context, st *pb.StreamStart, aio provider.AttachIO) error {
		return ep.RunInContainer(ctx, st.GetNamespace(), st.GetPod(), st.GetContainer(), st.GetCommand(), aio)
	})
}

func (s *Server) Attach(stream grpc.BidiStreamingServer[pb.StreamInput, pb.StreamOutput]) error {
	ap, ok := s.p.(provider.ContainerAttachProvider)
	if !ok {
		return status.Error(codes.Unimplemented, "the provider does not attach")
	}
	return serveAttached(stream, func(ctx context.Context, st *pb.StreamStart, aio provider.AttachIO) error {
		return ap.AttachToContainer(ctx, st.GetNamespace(), st.GetPod(), st.GetContainer(), aio)
	})
}

// serveAttached runs an exec or attach session: it reads the start, hands the
// provider the session's streams, and ends with the exit code.
func serveAttached(stream grpc.BidiStreamingServer[pb.StreamInput, pb.StreamOutput], run func(context.Context, *pb.StreamStart, provider.AttachIO) error) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toStatus(errNoStart)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sio := &serverIO{start: start, send: &lockedSender[pb.StreamOutput]{send: stream.Send}, resize: make(chan provider.TermSize, 4)}
	var stdinW *io.PipeWriter
	if start.GetStdin() {
		sio.stdin, stdinW = io.Pipe()
	}
	go func() {
		defer close(sio.resize)
		if stdinW != nil {
			defer stdinW.Close()
		}
		for {
			in, err := stream.Recv()
			if err != nil {
				return
			}
			switch {
			case in.GetStdin() != nil && stdinW != nil:
				if _, err := stdinW.Write(in.GetStdin()); err != nil {
					return
				}
			case in.GetStdinClosed() && stdinW != nil:
				stdinW.Close()
			case in.GetResize() != nil:
				select {
				case sio.resize <- provider.TermSize{Width: uint16(in.GetResize().GetWidth()), Height: uint16(in.GetResize().GetHeight())}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	err = run(ctx, start, sio)
	code := 0
	var ee *provider.ExecError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode
	case err != nil:
		return toStatus(err)
	}
	return sio.send.do(&pb.StreamOutput{Output: &pb.StreamOutput_ExitCode{ExitCode: int32(code)}})
}

// lockedSender serializes the sends of a stream, which gRPC allows from one
// goroutine at a time.
type lockedSender[T any] struct {
	mu   sync.Mutex
	send func(*T) error
}

func (l *lockedSender[T]) do(m *T) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.send(m)
}

// serverIO is a session's provider.AttachIO on the server's end.
type serverIO struct {
	start  *pb.StreamStart
	stdin  io.Reader
	send   *lockedSender[pb.StreamOutput]
	resize chan provider.TermSize
}

func (s *serverIO) Stdin() io.Reader { return s.stdin }
func (s *serverIO) TTY() bool        { return s.start.GetTty() }
func (s *serverIO) Resize() <-chan provider.TermSize {
	if !s.start.GetTty() {
		return nil
	}
	return s.resize
}

func (s *serverIO) Stdout() io.WriteCloser {
	if !s.start.GetStdout() {
		return nil
	}
	return outWriter{func(b []byte) *pb.StreamOutput { return &pb.StreamOutput{Output: &pb.StreamOutput_Stdout{Stdout: b}} }, s.send}
}

func (s *serverIO) Stderr() io.WriteCloser {
	if !s.start.GetStderr() || s.start.GetTty() {
		return nil
	}
	return outWriter{func(b []byte) *pb.StreamOutput { return &pb.StreamOutput{Output: &pb.StreamOutput_Stderr{Stderr: b}} }, s.send}
}

type outWriter struct {
	wrap func([]byte) *pb.StreamOutput
	send *lockedSender[pb.StreamOutput]
}

func (w outWriter) Write(b []byte) (int, error) {
	for rest := b; len(rest) > 0; {
		n := min(len(rest), chunkSize)
		if err := w.send.do(w.wrap(append([]byte(nil), rest[:n]...))); err != nil {
			return len(b) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(b), nil
}

func (outWriter) Close() error { return nil }

func (s *Server) PortForward(stream grpc.BidiStreamingServer[pb.PortForwardInput, pb.Chunk]) error {
	pf, ok := s.p.(provider.PortForwardProvider)
	if !ok {
		return status.Error(codes.Unimplemented, "the provider does not forward ports")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toStatus(errNoStart)
	}
	conn := &streamConn{
		recv: func() ([]byte, error) {
			in, err := stream.Recv()
			if err != nil {
				return nil, err
			}
			return in.GetData(), nil
		},
		send: func(b []byte) error { return stream.Send(&pb.Chunk{Data: b}) },
	}
	return toStatus(pf.PortForward(stream.Context(), start.GetNamespace(), start.GetPod(), start.GetPort(), conn))
}

// streamConn is a byte stream over a gRPC stream of chunks.
type streamConn struct {
	recv    func() ([]byte, error)
	send    func([]byte) error
	closeFn func() error
	buf     []byte
	mu      sync.Mutex
}

func (c *streamConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		b, err := c.recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return 0, io.EOF
			}
			return 0, err
		}
		c.buf = b
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for rest := p; len(rest) > 0; {
		n := min(len(rest), chunkSize)
		if err := c.send(append([]byte(nil), rest[:n]...)); err != nil {
			return len(p) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(p), nil
}

func (c *streamConn) Close() error {
	if c.closeFn != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.closeFn()
	}
	return nil
}

// --- the client's end ---

// GetContainerLogs streams the provider's logs.
func (c *Client) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	if !c.caps().GetLogs() {
		return nil, errdefs.NotImplemented("the remote provider serves no logs")
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.api.GetContainerLogs(ctx, logsRequest(namespace, pod, container, opts))
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	// The first message tells whether the provider found the container, so that
	// a missing one is a 404 rather than an empty body.
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, fromStatus(err)
	}
	return &logReader{stream: stream, cancel: cancel, buf: first.GetData(), eof: errors.Is(err, io.EOF)}, nil
}

type logReader struct {
	stream grpc.ServerStreamingClient[pb.Chunk]
	cancel context.CancelFunc
	buf    []byte
	eof    bool
}

func (r *logReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		m, err := r.stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		if err != nil {
			return 0, fromStatus(err)
		}
		r.buf = m.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *logReader) Close() error { r.cancel(); return nil }

// RunInContainer runs cmd through the provider's Exec.
func (c *Client) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	if !c.caps().GetExec() {
		return errdefs.NotImplemented("the remote provider does not exec")
	}
	return c.attached(ctx, c.api.Exec, &pb.StreamStart{Namespace: namespace, Pod: pod, Container: container, Command: cmd}, attach)
}

// AttachToContainer attaches through the provider's Attach.
func (c *Client) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	if !c.caps().GetAttach() {
		return errdefs.NotImplemented("the remote provider does not attach")
	}
	return c.attached(ctx, c.api.Attach, &pb.StreamStart{Namespace: namespace, Pod: pod, Container: container}, attach)
}

func (c *Client) attached(ctx context.Context, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[pb.StreamInput, pb.StreamOutput], error), start *pb.StreamStart, aio provider.AttachIO) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx)
	if err != nil {
		return fromStatus(err)
	}
	start.Stdin, start.Stdout, start.Stderr, start.Tty = aio.Stdin() != nil, aio.Stdout() != nil, aio.Stderr() != nil, aio.TTY()
	send := &lockedSender[pb.StreamInput]{send: stream.Send}
	if err := send.do(&pb.StreamInput{Input: &pb.StreamInput_Start{Start: start}}); err != nil {
		return fromStatus(err)
	}
	if in := aio.Stdin(); in != nil {
		go func() {
			buf := make([]byte, chunkSize)
			for {
				n, err := in.Read(buf)
				if n > 0 {
					if send.do(&pb.StreamInput{Input: &pb.StreamInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
						return
					}
				}
				if err != nil {
					_ = send.do(&pb.StreamInput{Input: &pb.StreamInput_StdinClosed{StdinClosed: true}})
					return
				}
			}
		}()
	}
	if resize := aio.Resize(); resize != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sz, ok := <-resize:
					if !ok {
						return
					}
					_ = send.do(&pb.StreamInput{Input: &pb.StreamInput_Resize{Resize: &pb.TerminalSize{Width: uint32(sz.Width), Height: uint32(sz.Height)}}})
				}
			}
		}()
	}
	for {
		out, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("the remote provider ended the session without an exit code")
		}
		if err != nil {
			return fromStatus(err)
		}
		switch o := out.GetOutput().(type) {
		case *pb.StreamOutput_Stdout:
			if w := aio.Stdout(); w != nil {
				if _, err := w.Write(o.Stdout); err != nil {
					return err
				}
			}
		case *pb.StreamOutput_Stderr:
			if w := aio.Stderr(); w != nil {
				if _, err := w.Write(o.Stderr); err != nil {
					return err
				}
			}
		case *pb.StreamOutput_ExitCode:
			if o.ExitCode != 0 {
				return &provider.ExecError{ExitCode: int(o.ExitCode)}
			}
			return nil
		}
	}
}

// PortForward forwards stream to port of the pod through the provider.
func (c *Client) PortForward(ctx context.Context, namespace, pod string, port int32, local io.ReadWriteCloser) error {
	if !c.caps().GetPortForward() {
		return errdefs.NotImplemented("the remote provider does not forward ports")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.PortForward(ctx)
	if err != nil {
		return fromStatus(err)
	}
	if err := stream.Send(&pb.PortForwardInput{Input: &pb.PortForwardInput_Start{Start: &pb.PortForwardStart{Namespace: namespace, Pod: pod, Port: port}}}); err != nil {
		return fromStatus(err)
	}
	remote := &streamConn{
		recv: func() ([]byte, error) {
			m, err := stream.Recv()
			if err != nil {
				return nil, err
			}
			return m.GetData(), nil
		},
		send: func(b []byte) error {
			return stream.Send(&pb.PortForwardInput{Input: &pb.PortForwardInput_Data{Data: b}})
		},
		closeFn: stream.CloseSend,
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(remote, local)
		_ = remote.Close()
		done <- err
	}()
	_, err = io.Copy(local, remote)
	local.Close()
	if err != nil {
		return fromStatus(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}
