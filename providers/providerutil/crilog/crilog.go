// Package crilog serves container log files written in the CRI logging format
// ("<RFC3339Nano> <stream> <P|F> <message>" per record, as containerd writes them
// and as podman's k8s-file log driver writes them) with the options of the
// kubelet's /containerLogs endpoint: tail, since, timestamps, limit and follow.
//
// The reading is the kubelet's own, k8s.io/cri-client's logs.ReadLogs (partial
// records joined, tail found by seeking from the end, follow by inotify); this
// package adapts it to the provider contract's options and to providers whose
// "is the container still running" answer does not come from a CRI runtime. The CRI
// and Slurm providers share it; it knows nothing of either.
package crilog

import (
	"context"
	"io"
	"os"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"

	"github.com/vkubelet/vkubelet/provider"
)

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

// Options converts the provider contract's log options into cri-client's.
func Options(opts provider.ContainerLogOpts, follow bool, now time.Time) *logs.LogOptions {
	o := &logs.LogOptions{Since: Since(opts, now), Follow: follow, Timestamp: opts.Timestamps}
	if opts.TailSet {
		o.TailLines = ptrTo(int64(max(opts.Tail, 0)))
	}
	if opts.LimitBytes > 0 {
		o.LimitBytes = ptrTo(opts.LimitBytes)
	}
	return o
}

func ptrTo[T any](v T) *T { return &v }

// Open serves the log file at path with opts. When follow is set, the reader
// goes on with new lines until ctx ends or running reports that the container has
// stopped (its last lines are read first). The caller closes the reader. A file
// that does not exist is an error satisfying errors.Is(err, os.ErrNotExist).
func Open(ctx context.Context, path string, opts provider.ContainerLogOpts, follow bool, running func(context.Context) bool) (io.ReadCloser, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	if running == nil {
		running = func(context.Context) bool { return false }
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		// Both streams go to the one reader, in the file's order, as the
		// kubelet's endpoint serves them.
		err := logs.ReadLogs(ctx, path, "container", Options(opts, follow, time.Now()), runningStatus{running: running}, pw, pw)
		if ctx.Err() != nil {
			err = nil // the reader was closed, or the caller gave up
		}
		pw.CloseWithError(err)
	}()
	return &cancelReader{PipeReader: pr, cancel: cancel}, nil
}

// runningStatus answers the one question ReadLogs asks the runtime while it
// follows a log: is the container still running.
type runningStatus struct {
	internalapi.RuntimeService // nil: ReadLogs calls nothing else
	running                    func(context.Context) bool
}

func (r runningStatus) ContainerStatus(ctx context.Context, _ string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if r.running(ctx) {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{State: state}}, nil
}

type cancelReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (r *cancelReader) Close() error {
	r.cancel()
	return r.PipeReader.Close()
}
