package crilog

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
)

const sample = "2026-01-02T03:04:05.000000001Z stdout P hel\n" +
	"2026-01-02T03:04:05.5Z stdout F lo world\n" +
	"2026-01-02T03:04:06Z stderr F second\n" +
	"2026-01-02T03:04:07Z stdout F third\n"

func writeLog(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string, opts provider.ContainerLogOpts) string {
	t.Helper()
	r, err := Open(context.Background(), path, opts, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Partial records are joined, both streams come in the file's order, and tail,
// since, limit and timestamps are the kubelet's.
func TestOpenServesTheKubeletsOptions(t *testing.T) {
	path := writeLog(t, sample)
	since := time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)
	for name, c := range map[string]struct {
		opts provider.ContainerLogOpts
		want string
	}{
		"all":        {provider.ContainerLogOpts{}, "hello world\nsecond\nthird\n"},
		"tail 2":     {provider.ContainerLogOpts{Tail: 2, TailSet: true}, "second\nthird\n"},
		"tail 0":     {provider.ContainerLogOpts{Tail: 0, TailSet: true}, ""},
		"since":      {provider.ContainerLogOpts{SinceTime: &since}, "second\nthird\n"},
		"limit":      {provider.ContainerLogOpts{LimitBytes: 8}, "hello wo"},
		"timestamps": {provider.ContainerLogOpts{Tail: 1, TailSet: true, Timestamps: true}, "2026-01-02T03:04:07.000000000Z third\n"},
	} {
		if got := read(t, path, c.opts); got != c.want {
			t.Errorf("%s: got %q, want %q", name, got, c.want)
		}
	}
}

// A missing file is os.ErrNotExist, at once.
func TestOpenMissingFile(t *testing.T) {
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "none"), provider.ContainerLogOpts{}, false, nil); !os.IsNotExist(err) {
		t.Errorf("err = %v, want not-exist", err)
	}
}

// Following, lines written later arrive, and the reader ends once the container
// has stopped and the last lines are read.
func TestOpenFollowsUntilTheContainerStops(t *testing.T) {
	path := writeLog(t, sample)
	var stopped atomic.Bool
	r, err := Open(context.Background(), path, provider.ContainerLogOpts{Tail: 1, TailSet: true}, true,
		func(context.Context) bool { return !stopped.Load() })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	next := func(what string) string { // "" at the end
		t.Helper()
		return eventually.Receive(t, lines, 10*time.Second, what)
	}
	if got := next("the tail"); got != "third\n" {
		t.Fatalf("the tail of one line is %q, want third", got)
	}
	// Written once the reader has read all there was.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("2026-01-02T03:04:08Z stdout F fourth\n")
	f.Close()
	if got := next("a line written later"); got != "fourth\n" {
		t.Fatalf("followed %q, want fourth", got)
	}
	stopped.Store(true)
	if got := next("the end once the container stopped"); got != "" {
		t.Fatalf("after the container stopped, read %q, want the end", got)
	}
}
