package providerutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/vkubelet/vkubelet/provider"
)

func TestDecodeJSONFile(t *testing.T) {
	type conf struct {
		Delay Duration `json:"delay"`
		Name  string   `json:"name"`
	}
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var c conf
	if err := DecodeJSONFile(write(`{"delay": "1m30s", "name": "x"}`), &c); err != nil || c.Delay.Duration != 90*time.Second || c.Name != "x" {
		t.Fatalf("got %+v, %v", c, err)
	}
	for body, want := range map[string]string{
		`{"dealy": "1s"}`:       "unknown field",
		`{"delay": 5}`:          "duration must be a string",
		`{"delay": "soon"}`:     "invalid duration",
		`{"name": "a"} {"x":1}`: "unexpected data",
	} {
		if err := DecodeJSONFile(write(body), &conf{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one with %q", body, err, want)
		}
	}
}

func TestResourceMetrics(t *testing.T) {
	at := time.Unix(1000, 0)
	fams := ResourceMetrics(at, NodeUsage{CPUCoreNanos: 2e9, WorkingSetBytes: 100}, []PodUsage{{
		Namespace: "ns", Name: "p", CPUCoreNanos: 1e9, WorkingSetBytes: 50,
		Containers: []ContainerUsage{{Name: "c", Start: time.Unix(900, 0), CPUCoreNanos: 5e8, WorkingSetBytes: 40}},
	}}, false)
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()] = v
		}
	}
	want := map[string]float64{
		"node_cpu_usage_seconds_total": 2, "node_memory_working_set_bytes": 100,
		"pod_cpu_usage_seconds_total": 1, "pod_memory_working_set_bytes": 50,
		"container_cpu_usage_seconds_total": 0.5, "container_memory_working_set_bytes": 40,
		"container_start_time_seconds": 900, "scrape_error": 0,
	}
	if len(got) != len(want) {
		t.Fatalf("families %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// Without pods, the pod and container families are left out.
	if n := len(ResourceMetrics(at, NodeUsage{}, nil, true)); n != 3 {
		t.Fatalf("%d families without pods, want node cpu, node memory, scrape_error", n)
	}
}

func TestExecResult(t *testing.T) {
	var ee *provider.ExecError
	if err := ExecResult(utilexec.CodeExitError{Err: errors.New("x"), Code: 3}); !errors.As(err, &ee) || ee.ExitCode != 3 {
		t.Fatalf("exit 3 became %v", err)
	}
	plain := errors.New("connection reset")
	if err := ExecResult(plain); err != plain {
		t.Fatalf("other errors must pass through, got %v", err)
	}
}
