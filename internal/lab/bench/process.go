package bench

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

// node is a node implementation under measurement: a child process that keeps a
// Node object Ready and runs the pods bound to it.
type node struct {
	kind  string   // "vkubelet" or "kwok"
	names []string // the Node objects
	proc  *child
	// provider, if set, is the provider's own process (`vkubelet provider
	// serve`) behind the agent: its CPU is reported next to the agent's.
	provider *child
	// metricsURL serves the process's Go runtime metrics (/metrics) and pprof
	// (/debug/pprof), for its live heap; empty if it serves none.
	metricsURL string
	// registeredIsReady: the Node is measured once it exists, as its provider
	// reports it NotReady on purpose (upstream's mock: KubeletPending).
	registeredIsReady bool
	// writes returns the API writes counted so far for the node, keyed
	// "VERB resource[/subresource]".
	writes func(ctx context.Context) (map[string]float64, error)
	// podWatches, if set, returns how many pod watches the process has opened
	// (each watch the API server closes is one more): the agent's own count.
	podWatches func(ctx context.Context) (float64, error)
	// benchWrites are writes, per pod started, that writes counts but the benchmark
	// itself made; they are subtracted.
	benchWrites map[string]float64
	// cleanup, if set, runs after the process has stopped.
	cleanup func()
}

// countPodWatches is podWatches, or 0 for a process that does not count them.
func (n *node) countPodWatches(ctx context.Context) (float64, error) {
	if n.podWatches == nil {
		return 0, nil
	}
	return n.podWatches(ctx)
}

func (n *node) stop() {
	n.proc.stop()
	if n.cleanup != nil {
		n.cleanup()
	}
}

// failed adds the end of the node's log to err.
func (n *node) failed(err error) error {
	return fmt.Errorf("%s: %w; %s log:\n%s", n.kind, err, n.kind, n.proc.tail())
}

// child is a process started by the benchmark, logging to a file.
type child struct {
	cmd     *exec.Cmd
	logPath string
	dir     string // removed when the process stops
}

// startChild runs bin with args, logging to a file in dir (a directory of its own,
// removed when it stops), with env added to the benchmark's environment. The
// binary's pages are dropped from the page cache first (dropCachedPages): each
// process under measurement reads its binary afresh.
func startChild(ctx context.Context, bin string, args, env []string, dir string) (*child, error) {
	c := &child{dir: dir, logPath: filepath.Join(dir, "log")}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	c.cmd = exec.CommandContext(ctx, bin, args...)
	if c.cmd.Err == nil {
		// Best effort: should it fail, only the file-backed figure changes: it
		// then depends on how the binary's pages came into the cache.
		_ = dropCachedPages(c.cmd.Path)
	}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	if err := c.cmd.Start(); err != nil {
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

func (c *child) stop() {
	_ = c.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(c.dir)
}

func (c *child) tail() string {
	b, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

type usage struct {
	rssMiB, peakMiB, cpuSeconds float64
	// anonMiB and fileMiB split rssMiB: the process's own memory (its heap,
	// stacks, the runtime's) and the pages of files it maps, mostly its
	// binary's code and read-only data, which the page cache shares.
	anonMiB, fileMiB float64
}

// usage reads the process's resident memory (now and peak) and CPU time from /proc.
func (c *child) usage() (usage, error) {
	var u usage
	pid := c.cmd.Process.Pid
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
			u.rssMiB = kb / 1024
		case "VmHWM:":
			u.peakMiB = kb / 1024
		case "RssAnon:":
			u.anonMiB = kb / 1024
		case "RssFile:":
			u.fileMiB = kb / 1024
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
	u.cpuSeconds = (utime + stime) / 100 // USER_HZ is 100 on Linux
	return u, nil
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// liveHeapMiB has a Go process collect garbage twice and returns its live heap:
// the heap in use right after the second collection, as its pprof heap endpoint
// reports it with gc=1&debug=1 (runtime.MemStats' HeapAlloc, read as the
// profile is written). Read from /metrics a moment later, as it was until
// 2026-11, it also counted what the process allocated in between: 44.5 MiB
// against about 35 in one vkubelet run with 10,000 pods, whose agent was still
// busy. With profile set, the heap profile as of that collection is saved there
// too.
func liveHeapMiB(ctx context.Context, baseURL, profile string) (float64, error) {
	// Two collections: the first moves what sync.Pools hold (HTTP/2's data
	// chunks, 1.5 to 3 MiB of them after a burst) to their victim caches, which
	// only the second frees, as runtime.GC twice does in this project's probes.
	resp, err := get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, fmt.Errorf("forcing a GC: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, fmt.Errorf("forcing a GC: %w", err)
	}
	heap, err := heapAllocOf(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("%s/debug/pprof/heap: %w", baseURL, err)
	}
	if profile != "" {
		if err := saveHeapProfile(ctx, baseURL, profile); err != nil {
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

// saveHeapProfile writes the process's heap profile, as of its last garbage
// collection, to file.
func saveHeapProfile(ctx context.Context, baseURL, file string) error {
	resp, err := get(ctx, http.DefaultClient, baseURL+"/debug/pprof/heap")
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

func get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
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

// scrape calls fn with every sample of the Prometheus text exposition at url.
func scrape(ctx context.Context, c *http.Client, url string, fn func(name string, labels map[string]string, value float64)) error {
	resp, err := get(ctx, c, url)
	if err != nil {
		return fmt.Errorf("reading metrics: %w", err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if name, labels, v, ok := parseSample(s.Text()); ok {
			fn(name, labels, v)
		}
	}
	return s.Err()
}

// parseSample parses one sample line of the Prometheus text format:
// name{label="value",...} value [timestamp].
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
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

// quietCPU and quietWait bound waitQuiet in the benchmark: a second of under
// 5 % of a core, waited for at most 30 s.
const (
	quietCPU  = 0.05
	quietWait = 30 * time.Second
)

// waitQuiet waits until the process used less than cpu seconds of CPU in one
// second, or until max has passed.
func waitQuiet(ctx context.Context, p *child, cpu float64, max time.Duration) error {
	last, err := p.usage()
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
		u, err := p.usage()
		if err != nil {
			return err
		}
		if u.cpuSeconds-last.cpuSeconds < cpu {
			return nil
		}
		last = u
	}
	return nil
}
