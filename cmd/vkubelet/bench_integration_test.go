package main

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/vkubelet/vkubelet/internal/bench"
	"github.com/vkubelet/vkubelet/internal/testenv"
)

// TestBenchMeasuresANodeNextToTheCeiling runs `vkubelet bench` for a few pods
// against the test control plane and checks that its figures are those of a
// real run: every pod started and stopped, one status write per pod start, the
// agent measured.
func TestBenchMeasuresANodeNextToTheCeiling(t *testing.T) {
	cp := testenv.ControlPlane(t)
	out, err := exec.Command(binary, "bench", "--pods", "40", "--concurrency", "10", "--json",
		"--kubeconfig", cp.KubeconfigPath, "--agent-env", "GOGC=100").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("bench: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r bench.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if r.Pods != 40 || r.CeilingPodsPerS <= 0 || r.PodsPerS <= 0 || r.DeletePodsPerS <= 0 {
		t.Fatalf("figures missing: %+v", r)
	}
	if r.RatioToCeiling != r.PodsPerS/r.CeilingPodsPerS {
		t.Errorf("ratio %v is not %v / %v", r.RatioToCeiling, r.PodsPerS, r.CeilingPodsPerS)
	}
	// Each start is one status write; the lease may renew during the run.
	if w := r.WritesByKind["PATCH pods/status"]; w < 0.99 || w > 1.01 {
		t.Errorf("status writes per pod = %v, want 1: %v", w, r.WritesByKind)
	}
	if !(r.P50ms > 0 && r.P50ms <= r.P90ms && r.P90ms <= r.P99ms) {
		t.Errorf("latencies p50/p90/p99 = %v/%v/%v", r.P50ms, r.P90ms, r.P99ms)
	}
	if r.IdleRSSMiB <= 0 || r.PeakRSSMiB < r.IdleRSSMiB || r.CPUSeconds <= 0 {
		t.Errorf("agent usage not measured: idle %v, peak %v MiB, cpu %v s", r.IdleRSSMiB, r.PeakRSSMiB, r.CPUSeconds)
	}
}
