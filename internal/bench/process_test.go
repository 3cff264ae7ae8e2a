package bench

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
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
