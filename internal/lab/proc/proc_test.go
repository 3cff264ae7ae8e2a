package proc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestHeapAllocIsReadFromTheTextHeapProfile(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	got, err := heapAllocOf(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// This process's own heap, read a moment apart: the same within a MiB.
	if diff := int64(got) - int64(ms.HeapAlloc); got == 0 || diff > 1<<20 || diff < -(1<<20) {
		t.Fatalf("HeapAlloc read as %d; runtime.MemStats has %d", got, ms.HeapAlloc)
	}
	if _, err := heapAllocOf(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1048576\n# Alloc = 5\n")); err == nil {
		t.Fatal("a profile without HeapAlloc read without an error")
	}
}

func TestWaitQuietWaitsForAProcessToStopUsingCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for seconds")
	}
	ctx := context.Background()
	idle, err := Start(ctx, "sleep", []string{"30"}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Stop()
	start := time.Now()
	if err := WaitQuiet(ctx, idle, 0.05, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("an idle process was waited for %v", took)
	}
	busy, err := Start(ctx, "sh", []string{"-c", "while :; do :; done"}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Stop()
	start = time.Now()
	if err := WaitQuiet(ctx, busy, 0.05, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("a busy process was found quiet after %v", took)
	}
}

func TestABinarysCachedPagesAreDroppedBeforeItStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bin")
	const size = 1 << 20
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, size), 0o755); err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC {
		t.Skip("the temp dir is in memory, whose pages are the file: nothing to drop")
	}
	if got := residentPages(t, path, size); got != size/os.Getpagesize() {
		t.Fatalf("%d pages of a file just written are cached; want all %d", got, size/os.Getpagesize())
	}
	if err := dropCachedPages(path); err != nil {
		t.Fatal(err)
	}
	if got := residentPages(t, path, size); got != 0 {
		t.Errorf("%d pages are still cached after dropCachedPages", got)
	}
}

// residentPages counts the pages of the file at path that are in the page cache.
func residentPages(t *testing.T, path string, size int) int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		line   string
		name   string
		labels map[string]string
		value  float64
		ok     bool
	}{
		{line: `go_memstats_heap_alloc_bytes 1.2e+06`, name: "go_memstats_heap_alloc_bytes", labels: map[string]string{}, value: 1.2e6, ok: true},
		{line: `apiserver_request_total{code="201",component="apiserver",resource="serviceaccounts",subresource="token",verb="POST"} 50`,
			name: "apiserver_request_total", labels: map[string]string{"code": "201", "component": "apiserver", "resource": "serviceaccounts", "subresource": "token", "verb": "POST"}, value: 50, ok: true},
		{line: `x{a="with, comma",b="quote \" and \\ slash"} 3 1700000000`, name: "x", labels: map[string]string{"a": "with, comma", "b": `quote " and \ slash`}, value: 3, ok: true},
		{line: `# TYPE x counter`},
		{line: ``},
		{line: `x{a="unterminated} 3`},
		{line: `x notanumber`},
	} {
		name, labels, v, ok := ParseSample(tc.line)
		if ok != tc.ok {
			t.Errorf("ParseSample(%q) ok = %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if name != tc.name || v != tc.value || len(labels) != len(tc.labels) {
			t.Errorf("ParseSample(%q) = %q %v %v", tc.line, name, labels, v)
			continue
		}
		for k, want := range tc.labels {
			if labels[k] != want {
				t.Errorf("ParseSample(%q): %s = %q, want %q", tc.line, k, labels[k], want)
			}
		}
	}
}

// The bench counts the pod watches under the labels the agent gives them, and
// nothing else.
