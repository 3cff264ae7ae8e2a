package cri

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// logPollInterval is how often a followed log looks for new lines.
const logPollInterval = 100 * time.Millisecond

// logLine is one line of a container's output, its partial pieces joined.
type logLine struct {
	at  time.Time
	msg []byte // with its newline, unless the container never ended the line
}

// parseCRILine parses "<RFC3339Nano> <stream> <P|F> <message>" (without the newline).
func parseCRILine(b []byte) (at time.Time, partial bool, msg []byte, err error) {
	ts, rest, ok := bytes.Cut(b, []byte{' '})
	if !ok {
		return at, false, nil, fmt.Errorf("malformed CRI log line %q", b)
	}
	if at, err = time.Parse(time.RFC3339Nano, string(ts)); err != nil {
		return at, false, nil, fmt.Errorf("malformed CRI log timestamp: %w", err)
	}
	_, rest, ok = bytes.Cut(rest, []byte{' '}) // stream: stdout or stderr
	if !ok {
		return at, false, nil, fmt.Errorf("malformed CRI log line %q", b)
	}
	tag, msg, _ := bytes.Cut(rest, []byte{' '})
	return at, bytes.Equal(tag, []byte("P")), msg, nil
}

// logParser turns CRI log file content into lines; it keeps a partial line (P
// records, or a record not yet ended in the file) until it is complete.
type logParser struct {
	pending []byte // an incomplete record of the file
	partial *logLine
}

func (lp *logParser) feed(data []byte) []logLine {
	var out []logLine
	data = append(lp.pending, data...)
	lp.pending = nil
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lp.pending = append([]byte(nil), data...)
			break
		}
		rec := data[:i]
		data = data[i+1:]
		at, partial, msg, err := parseCRILine(rec)
		if err != nil {
			continue
		}
		if lp.partial == nil {
			lp.partial = &logLine{at: at}
		}
		lp.partial.msg = append(lp.partial.msg, msg...)
		if !partial {
			lp.partial.msg = append(lp.partial.msg, '\n')
			out = append(out, *lp.partial)
			lp.partial = nil
		}
	}
	return out
}

// GetContainerLogs reads the container's CRI log file (the previous instance's with
// Previous) and applies every option as the kubelet does.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	p.mu.Lock()
	rec, ok := p.pods[podKey(namespace, name)]
	if !ok {
		p.mu.Unlock()
		return nil, notFound(namespace, name)
	}
	ids, started := rec.ctrIDs[container]
	known := false
	for _, c := range allContainers(rec.pod) {
		known = known || c.Name == container
	}
	p.mu.Unlock()
	if !known {
		return nil, errdefs.NotFound("cri: container %s/%s/%s not found", namespace, name, container)
	}
	if !started {
		return nil, errdefs.InvalidInput("cri: container %s/%s/%s is waiting to start", namespace, name, container)
	}
	id := ids[0]
	if opts.Previous {
		id = ids[1]
		if id == "" {
			return nil, errdefs.InvalidInput("cri: previous terminated container %s/%s/%s not found", namespace, name, container)
		}
	}
	st, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, errContext(podKey(namespace, name), err)
	}
	f, err := os.Open(st.Status.LogPath)
	if err != nil {
		return nil, errContext(podKey(namespace, name), err)
	}
	var since time.Time
	if opts.SinceSeconds > 0 {
		since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if opts.SinceTime != nil && opts.SinceTime.After(since) {
		since = *opts.SinceTime
	}
	follow := opts.Follow && !opts.Previous && st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer f.Close()
		err := p.copyLogs(ctx, f, pw, id, since, opts, follow)
		pw.CloseWithError(err)
	}()
	return &cancelReader{PipeReader: pr, cancel: cancel}, nil
}

type cancelReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (r *cancelReader) Close() error {
	r.cancel()
	return r.PipeReader.Close()
}

var errLimit = errors.New("limit reached")

// copyLogs writes the log of f to w. It returns nil at the end of the log (or when
// LimitBytes is reached, or, following, when ctx ends or the container exits).
func (p *Provider) copyLogs(ctx context.Context, f *os.File, w io.Writer, id string, since time.Time, opts provider.ContainerLogOpts, follow bool) error {
	written := int64(0)
	emit := func(l logLine) error {
		if l.at.Before(since) {
			return nil
		}
		var b []byte
		if opts.Timestamps {
			b = append([]byte(l.at.UTC().Format(time.RFC3339Nano)), ' ')
		}
		b = append(b, l.msg...)
		if opts.LimitBytes > 0 && written+int64(len(b)) > opts.LimitBytes {
			b = b[:opts.LimitBytes-written]
		}
		n, err := w.Write(b)
		written += int64(n)
		if err != nil {
			return err
		}
		if opts.LimitBytes > 0 && written >= opts.LimitBytes {
			return errLimit
		}
		return nil
	}
	var lp logParser
	r := bufio.NewReaderSize(f, 64<<10)
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	lines := lp.feed(data)
	if !since.IsZero() {
		kept := lines[:0]
		for _, l := range lines {
			if !l.at.Before(since) {
				kept = append(kept, l)
			}
		}
		lines = kept
	}
	if opts.TailSet && opts.Tail < len(lines) {
		lines = lines[len(lines)-max(opts.Tail, 0):]
	}
	for _, l := range lines {
		if err := emit(l); err != nil {
			return ignoreLimit(err)
		}
	}
	if !follow {
		return nil
	}
	buf := make([]byte, 64<<10)
	idle := 0
	for {
		n, err := r.Read(buf)
		if n > 0 {
			idle = 0
			for _, l := range lp.feed(buf[:n]) {
				if err := emit(l); err != nil {
					return ignoreLimit(err)
				}
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		idle++
		if idle%10 == 0 { // about every second without output: has it exited?
			st, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				// Read what it wrote last, then end.
				rest, _ := io.ReadAll(r)
				for _, l := range lp.feed(rest) {
					if err := emit(l); err != nil {
						return ignoreLimit(err)
					}
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPollInterval):
		}
	}
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}
