// Package crilog reads container log files written in the CRI logging format
// ("<RFC3339Nano> <stream> <P|F> <message>" per record, as containerd writes them
// and as podman's k8s-file log driver writes them) and serves them with the options
// of the kubelet's /containerLogs endpoint: tail, since, timestamps, limit and follow.
// The CRI and Slurm providers share it; it knows nothing of either.
package crilog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vkubelet/vkubelet/provider"
)

// PollInterval is how often a followed log looks for new lines.
const PollInterval = 100 * time.Millisecond

// Line is one line of a container's output, its partial records joined.
type Line struct {
	At  time.Time
	Msg []byte // with its newline, unless the container never ended the line
}

// parseRecord parses one record without its newline.
func parseRecord(b []byte) (at time.Time, partial bool, msg []byte, err error) {
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

// Parser turns log file content into lines. It keeps a partial line (P records,
// or a record the writer has not ended yet) until it is complete, so a file read
// while it grows yields whole lines only. Malformed records are skipped.
type Parser struct {
	pending []byte // an incomplete record of the file
	partial *Line
}

// Feed parses the next bytes of the file and returns the lines they complete.
func (lp *Parser) Feed(data []byte) []Line {
	var out []Line
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
		at, partial, msg, err := parseRecord(rec)
		if err != nil {
			continue
		}
		if lp.partial == nil {
			lp.partial = &Line{At: at}
		}
		lp.partial.Msg = append(lp.partial.Msg, msg...)
		if !partial {
			lp.partial.Msg = append(lp.partial.Msg, '\n')
			out = append(out, *lp.partial)
			lp.partial = nil
		}
	}
	return out
}

// Since is the earliest time of a line opts asks for (zero: all lines).
func Since(opts provider.ContainerLogOpts, now time.Time) time.Time {
	var since time.Time
	if opts.SinceSeconds > 0 {
		since = now.Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if opts.SinceTime != nil && opts.SinceTime.After(since) {
		since = *opts.SinceTime
	}
	return since
}

// Open serves the log file at path with opts. When follow is set, the reader
// goes on with new lines until ctx ends or running reports that the container has
// stopped (asked about once a second without output; its last lines are read
// first). The caller closes the reader.
func Open(ctx context.Context, path string, opts provider.ContainerLogOpts, follow bool, running func(context.Context) bool) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer f.Close()
		pw.CloseWithError(Copy(ctx, f, pw, opts, follow, running))
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

// Copy writes the log in f to w as opts asks. It returns nil at the end of the
// log, when LimitBytes is reached, or, following, when ctx ends or running
// reports the container stopped.
func Copy(ctx context.Context, f io.Reader, w io.Writer, opts provider.ContainerLogOpts, follow bool, running func(context.Context) bool) error {
	since := Since(opts, time.Now())
	written := int64(0)
	emit := func(l Line) error {
		if l.At.Before(since) {
			return nil
		}
		var b []byte
		if opts.Timestamps {
			b = append([]byte(l.At.UTC().Format(time.RFC3339Nano)), ' ')
		}
		b = append(b, l.Msg...)
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
	var lp Parser
	r := bufio.NewReaderSize(f, 64<<10)
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	lines := lp.Feed(data)
	if !since.IsZero() {
		kept := lines[:0]
		for _, l := range lines {
			if !l.At.Before(since) {
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
			for _, l := range lp.Feed(buf[:n]) {
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
		if idle%10 == 0 && !running(ctx) { // about every second without output
			rest, _ := io.ReadAll(r)
			for _, l := range lp.Feed(rest) {
				if err := emit(l); err != nil {
					return ignoreLimit(err)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(PollInterval):
		}
	}
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}
