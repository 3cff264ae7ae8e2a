// Package proc starts the lab's measured processes (a node agent, kwok, a
// provider) as children and reads what they cost: resident memory and CPU from
// /proc, the live heap from a Go process's pprof endpoint, samples from its
// Prometheus /metrics. The benchmark and the soak use it; it decides nothing.
package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Child is a process started by the lab, logging to a file.
type Child struct {
	Cmd     *exec.Cmd // started; its Process is the child
	logPath string
	dir     string // removed when the process stops
}

// Start runs bin with args, logging to a file in dir (a directory of its own,
// removed when it stops), with env added to the caller's environment. The
// binary's pages are dropped from the page cache first (dropCachedPages): each
// process under measurement reads its binary afresh.
func Start(ctx context.Context, bin string, args, env []string, dir string) (*Child, error) {
	c := &Child{dir: dir, logPath: filepath.Join(dir, "log")}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	c.Cmd = exec.CommandContext(ctx, bin, args...)
	if c.Cmd.Err == nil {
		// Best effort: should it fail, only the file-backed figure changes: it
		// then depends on how the binary's pages came into the cache.
		_ = dropCachedPages(c.Cmd.Path)
	}
	c.Cmd.Env = append(os.Environ(), env...)
	c.Cmd.Stdout, c.Cmd.Stderr = logFile, logFile
	if err := c.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return c, nil
}

// dropCachedPages writes back and drops the page cache's copy of the file at
// path, but for pages some process has mapped. A process's file-backed RSS is
// the pages of its binary it has mapped, and how many a fault maps depends on
// the cached pages' history, not only on what the process touches: the kernel
// maps whole large folios, and how large they are depends on how the pages came
// into the cache (written by the linker, read ahead, copied). The same vkubelet
// binary, idle with one node, had 48.7 MiB file-backed after a day of
// benchmarks, 42.8 freshly linked and 39.5 read afresh, while kwok's, built
// long before, stayed at 42.5 to 43.3. Read afresh, as after a reboot or from
// a freshly unpacked image, both are measured alike.
func dropCachedPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Dirty pages (a binary linked a moment ago) cannot be dropped until written.
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("writing %s back: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping %s's cached pages: %w", path, err)
	}
	return nil
}

// Stop interrupts the process, kills it if it has not ended 10 s later, and
// removes its directory.
func (c *Child) Stop() {
	_ = c.Cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = c.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(c.dir)
}

// Tail returns the last 20 lines of the process's log.
func (c *Child) Tail() string {
	b, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// Usage is what a process costs, as /proc shows it.
type Usage struct {
	RSSMiB, PeakMiB, CPUSeconds float64
	// AnonMiB and FileMiB split RSSMiB: the process's own memory (its heap,
	// stacks, the runtime's) and the pages of files it maps, mostly its
	// binary's code and read-only data, which the page cache shares.
	AnonMiB, FileMiB float64
}

// Usage reads the process's resident memory (now and peak) and CPU time from /proc.
func (c *Child) Usage() (Usage, error) {
	var u Usage
	pid := c.Cmd.Process.Pid
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			u.RSSMiB = kb / 1024
		case "VmHWM:":
			u.PeakMiB = kb / 1024
		case "RssAnon:":
			u.AnonMiB = kb / 1024
		case "RssFile:":
			u.FileMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the parenthesised command: utime and stime are the 12th and 13th.
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(rest[11], 64)
	stime, _ := strconv.ParseFloat(rest[12], 64)
	u.CPUSeconds = (utime + stime) / 100 // USER_HZ is 100 on Linux
	return u, nil
}

// FreeAddr returns a loopback address with a free port.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// LiveHeapMiB has a Go process collect garbage twice and returns its live heap:
// the heap in use right after the second collection, as its pprof heap endpoint
// reports it with gc=1&debug=1 (runtime.MemStats' HeapAlloc, read as the
// profile is written). Read from /metrics a moment later, as it was until
// 2026-11, it also counted what the process allocated in between: 44.5 MiB
// against about 35 in one vkubelet run with 10,000 pods, whose agent was still
// busy. With profile set, the heap profile as of that collection is saved there
// too.
func LiveHeapMiB(ctx context.Context, baseURL, profile string) (float64, error) {
	// Two collections: the first moves what sync.Pools hold (HTTP/2's data
	// chunks, 1.5 to 3 MiB of them after a burst) to their victim caches, which
	// only the second frees, as runtime.GC twice does in this project's probes.
	resp, err := Get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, fmt.Errorf("forcing a GC: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = Get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, fmt.Errorf("forcing a GC: %w", err)
	}
	heap, err := heapAllocOf(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("%s/debug/pprof/heap: %w", baseURL, err)
	}
	if profile != "" {
		if err := SaveHeapProfile(ctx, baseURL, profile); err != nil {
			return 0, err
		}
	}
	return float64(heap) / (1 << 20), nil
}

// heapAllocOf reads HeapAlloc from a heap profile in pprof's text form (debug=1),
// which ends with the process's runtime.MemStats as "# Name = value" lines.
func heapAllocOf(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no HeapAlloc in the heap profile")
}

// SaveHeapProfile writes the process's heap profile, as of its last garbage
// collection, to file.
func SaveHeapProfile(ctx context.Context, baseURL, file string) error {
	resp, err := Get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap")
	if err != nil {
		return fmt.Errorf("reading the heap profile: %w", err)
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("saving the heap profile: %w", err)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("saving the heap profile: %w", err)
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("saving the heap profile %s: %w", file, err)
	}
	return nil
}

// Get sends a GET to url and returns the response, an error unless it is 200 OK.
func Get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp, err
}

// Scrape calls fn with every sample of the Prometheus text exposition at url.
func Scrape(ctx context.Context, c *http.Client, url string, fn func(name string, labels map[string]string, value float64)) error {
	resp, err := Get(ctx, c, url)
	if err != nil {
		return fmt.Errorf("reading metrics: %w", err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if name, labels, v, ok := ParseSample(s.Text()); ok {
			fn(name, labels, v)
		}
	}
	return s.Err()
}

// ParseSample parses one sample line of the Prometheus text format:
// name{label="value",...} value [timestamp].
func ParseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return "", nil, 0, false
	} else {
		name, rest = line[:i], line[i:]
	}
	labels = map[string]string{}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, false
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				switch ch := rest[i]; {
				case ch == '\\' && i+1 < len(rest):
					i++
					switch rest[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[i])
					}
				case ch == '"':
					rest, closed = rest[i+1:], true
				default:
					val.WriteByte(ch)
				}
				if closed {
					break
				}
			}
			if !closed {
				return "", nil, 0, false
			}
			labels[key] = val.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// QuietCPU and QuietWait are the benchmark's bounds of WaitQuiet: a second of under
// 5 % of a core, waited for at most 30 s.
const (
	QuietCPU  = 0.05
	QuietWait = 30 * time.Second
)

// WaitQuiet waits until the process used less than cpu seconds of CPU in one
// second, or until max has passed.
func WaitQuiet(ctx context.Context, p *Child, cpu float64, max time.Duration) error {
	last, err := p.Usage()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		u, err := p.Usage()
		if err != nil {
			return err
		}
		if u.CPUSeconds-last.CPUSeconds < cpu {
			return nil
		}
		last = u
	}
	return nil
}

// Descriptors counts the process's open file descriptors and, among them, its
// sockets (network connections, listeners and unix sockets alike).
func (c *Child) Descriptors() (fds, sockets int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", c.Cmd.Process.Pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the directory was read
		}
		fds++
		if strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	return fds, sockets, nil
}
