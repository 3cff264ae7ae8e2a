// Package leakcheck finds goroutines and file descriptors that a stopped node
// left behind. The fault suite takes a snapshot before it starts a node and checks
// after the node has stopped that nothing of it still runs or stays open: a node
// agent runs for months, so what one fault leaks, a thousand faults pile up.
//
// A goroutine counts when it started after the snapshot and runs vkubelet's code
// (not a test's) or client-go's informers, queues and watches. Goroutines of the
// HTTP connection pool, which client-go shares between clients and closes when
// idle, do not count. A file descriptor counts when it was opened after the
// snapshot and is a file, a pipe or a listening socket; connected sockets (the
// same pool) and child processes' handles do not. Goroutines of the control plane
// that a fault test restarts, and those waiting for the daemons package spawn
// runs around a node, do not count either.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Snapshot is what ran and was open when it was taken.
type Snapshot struct {
	goroutines map[uint64]bool
	fds        map[string]bool
}

// Take records the goroutines and file descriptors of the process.
func Take() *Snapshot {
	s := &Snapshot{goroutines: map[uint64]bool{}, fds: map[string]bool{}}
	for _, g := range goroutines() {
		s.goroutines[g.id] = true
	}
	for fd := range openFDs() {
		s.fds[fd] = true
	}
	return s
}

// Check fails t if, within timeout, goroutines or file descriptors that count
// (see the package comment) started or opened since s are still there.
func (s *Snapshot) Check(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		gs, fds := s.leaks()
		if len(gs) == 0 && len(fds) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines and %d file descriptors left %s after the node stopped:\n%s\n%s",
				len(gs), len(fds), timeout, strings.Join(fds, "\n"), strings.Join(gs, "\n\n"))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CheckGoroutinesOf fails t if, within timeout, goroutines started since s and
// running any of code (a package or function path, matched within the stack)
// are still there. It is for tests that follow other code than a node's (the
// streaming libraries of one kubelet API session, say); file descriptors are
// not looked at.
func (s *Snapshot) CheckGoroutinesOf(t testing.TB, timeout time.Duration, code ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, g := range goroutines() {
			if !s.goroutines[g.id] && slices.ContainsFunc(code, func(c string) bool { return strings.Contains(g.stack, c) }) {
				left = append(left, g.stack)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines left after %s:\n%s", len(left), timeout, strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaks returns the stacks of the goroutines and the descriptions of the file
// descriptors that count.
func (s *Snapshot) leaks() (gs, fds []string) {
	for _, g := range goroutines() {
		if !s.goroutines[g.id] && counts(g.stack) {
			gs = append(gs, g.stack)
		}
	}
	listening := listeningInodes()
	for fd, target := range openFDs() {
		if s.fds[fd] {
			continue
		}
		// A child process's handle: a child the node leaked shows as the
		// goroutine waiting for it, which counts.
		if target == "anon_inode:[pidfd]" {
			continue
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			if !listening[strings.TrimSuffix(inode, "]")] {
				continue
			}
			target += " (listening)"
		}
		fds = append(fds, "fd "+fd+" -> "+target)
	}
	slices.Sort(fds)
	return gs, fds
}

type goroutine struct {
	id    uint64
	stack string
}

// goroutines returns every goroutine of the process with its stack.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(block, []byte("\n"))
		rest, ok := bytes.CutPrefix(header, []byte("goroutine "))
		if !ok {
			continue
		}
		idText, _, _ := bytes.Cut(rest, []byte(" "))
		id, err := strconv.ParseUint(string(idText), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutine{id: id, stack: string(block)})
	}
	return out
}

// ours are the code locations whose goroutines count.
var ours = []string{
	"k8s.io/client-go/tools/cache.",
	"k8s.io/client-go/util/workqueue.",
	"k8s.io/client-go/tools/watch.",
	"k8s.io/client-go/tools/leaderelection.",
	"k8s.io/client-go/util/certificate.",
}

// counts reports whether a goroutine with stack runs code whose goroutines
// count: vkubelet's own, outside test files and internal/lab/testenv, or client-go's
// above. A frame is a function line followed by its file line.
func counts(stack string) bool {
	lines := strings.Split(stack, "\n")
	for i := 1; i+1 < len(lines); i++ {
		fn, file := lines[i], strings.TrimSpace(lines[i+1])
		if strings.HasPrefix(fn, "created by ") || strings.HasPrefix(fn, "\t") {
			continue
		}
		if strings.HasPrefix(fn, "github.com/vkubelet/vkubelet/") {
			if !testInfrastructure(fn) && !processWide(fn) && !strings.Contains(file, "_test.go:") {
				return true
			}
			continue
		}
		for _, p := range ours {
			if strings.HasPrefix(fn, p) {
				return true
			}
		}
	}
	return false
}

// testInfrastructure reports whether fn belongs to what the tests start around a
// node (the control plane a fault test restarts, the test environment), whose
// goroutines outlive a node by design. Package spawn runs the daemons around a
// node (the control plane's components, cluster networking, Slurm), never the
// node's own work, and its goroutine that waits for a child names only spawn:
// a restarted kube-apiserver's would otherwise count.
func testInfrastructure(fn string) bool {
	return strings.Contains(fn, "/internal/lab/testenv/") ||
		strings.Contains(fn, "/internal/lab/controlplane.") ||
		strings.Contains(fn, "/internal/lab/spawn.")
}

// processWide reports whether fn is a goroutine the process keeps for its whole
// life, started by the first node that needs it and shared by all: the
// goroutine internal/compact/deepstack runs S2's packs on.
func processWide(fn string) bool {
	return strings.HasPrefix(fn, "github.com/vkubelet/vkubelet/internal/compact/deepstack.serve(")
}

// openFDs maps the process's open file descriptors to what they point at.
func openFDs() map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // closed since the directory was read (ReadDir's own, for one)
		}
		out[e.Name()] = target
	}
	return out
}

// listeningInodes returns the socket inodes of TCP sockets in the LISTEN state.
func listeningInodes() map[string]bool {
	out := map[string]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) > 9 && f[3] == "0A" {
				out[f[9]] = true
			}
		}
	}
	return out
}

// String describes a snapshot, for logs.
func (s *Snapshot) String() string {
	return fmt.Sprintf("%d goroutines, %d file descriptors", len(s.goroutines), len(s.fds))
}
