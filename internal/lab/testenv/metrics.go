package testenv

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// MetricSum scrapes http://addr/metrics (a node's --metrics-addr) and returns the
// sum of the samples of the metric name whose labels contain every one of
// labels (each as written in the exposition, `name="pod_sync"`): 0 when none do.
func MetricSum(t testing.TB, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0.0
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
sample:
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue sample
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric %s: sample %q: %v", name, line, err)
		}
		total += v
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
