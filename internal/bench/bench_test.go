package bench

import (
	"strings"
	"testing"
	"time"
)

func TestMedianTakesEachFigureSeparately(t *testing.T) {
	runs := []*Result{
		{Pods: 10, PodsPerS: 300, RatioToCeiling: 0.9, P99ms: 50, WritesByKind: map[string]float64{"PATCH pods/status": 1}},
		{Pods: 10, PodsPerS: 100, RatioToCeiling: 0.7, P99ms: 900, WritesByKind: map[string]float64{"PATCH pods/status": 1, "PUT leases": 0.2}},
		{Pods: 10, PodsPerS: 200, RatioToCeiling: 0.8, P99ms: 70},
	}
	m := Median(runs)
	if m.PodsPerS != 200 || m.RatioToCeiling != 0.8 || m.P99ms != 70 {
		t.Fatalf("median = %.0f pods/s, ratio %.1f, p99 %.0f; want 200, 0.8, 70", m.PodsPerS, m.RatioToCeiling, m.P99ms)
	}
	// A kind missing from a run counts as zero there.
	if got := m.WritesByKind["PUT leases"]; got != 0 {
		t.Fatalf("PUT leases = %v, want the median of 0, 0.2, 0 = 0", got)
	}
	if got := m.WritesByKind["PATCH pods/status"]; got != 1 {
		t.Fatalf("PATCH pods/status = %v, want 1", got)
	}
	if len(m.Runs) != 3 || m.Pods != 10 {
		t.Fatalf("runs = %d, pods = %d", len(m.Runs), m.Pods)
	}
	if Median(runs[:1]) != runs[0] {
		t.Fatal("the median of one run is not that run")
	}
}

func TestRunningStatusPatchIsAKubeletShapedStatus(t *testing.T) {
	p := benchPod("p-1", "node")
	p.UID = "uid-1"
	patch, err := runningStatusPatch(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"uid":"uid-1"`, `"phase":"Running"`, `"type":"Ready"`, `"type":"ContainersReady"`, `"name":"c"`, `"running":{`, `"podIP":"10.0.0.2"`} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("patch lacks %s: %s", want, patch)
		}
	}
}
