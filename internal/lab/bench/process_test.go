package bench

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
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
	idle, err := startChild(ctx, "sleep", []string{"30"}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.stop()
	start := time.Now()
	if err := waitQuiet(ctx, idle, 0.05, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("an idle process was waited for %v", took)
	}
	busy, err := startChild(ctx, "sh", []string{"-c", "while :; do :; done"}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.stop()
	start = time.Now()
	if err := waitQuiet(ctx, busy, 0.05, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("a busy process was found quiet after %v", took)
	}
}
