package main

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/vkubelet/vkubelet/internal/lab/soak"
)

// TestSoakChurnsANodeAndSamplesIt runs a short `vkubeletctl soak` on a local
// control plane of its own (the soak needs the scheduler and the
// controller-manager, which this package's shared one does not run) and checks
// that every kind of churn reached the node and that the samples are a real
// process's. Whether a 30-minute soak is flat is `make soak`'s question.
func TestSoakChurnsANodeAndSamplesIt(t *testing.T) {
	const pods = 20
	cmd := exec.Command(vkubeletctl, "soak", "--json", "--pods", "20", "--duration", "40s", "--warm-up", "10s",
		"--sample-every", "5s", "--deletes", "1", "--updates", "1", "--execs", "1", "--logs", "1", "--log-follow", "3s")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("soak: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r soak.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("soak --json printed %q: %v", out, err)
	}
	for _, kind := range []string{"delete", "update", "exec", "logs"} {
		if o := r.Ops[kind]; o.OK == 0 || o.Failed != 0 {
			t.Errorf("%s: %+v, want some done and none failed", kind, o)
		}
	}
	// Each deleted pod's ReplicaSet created a replacement.
	if r.Created < r.Ops["delete"].OK {
		t.Errorf("%d pods created for %d deleted", r.Created, r.Ops["delete"].OK)
	}
	if len(r.Samples) < 3 || len(r.Trends) != len(soak.Figures()) {
		t.Fatalf("%d samples, trends %v: want a sample every 5 s of 40 and a trend per figure", len(r.Samples), r.Trends)
	}
	for _, s := range r.Samples {
		if s.HeapMiB <= 0 || s.RSSMiB <= s.HeapMiB || s.Goroutines <= 0 || s.FDs <= s.Sockets || s.Sockets <= 0 {
			t.Errorf("a sample that is no process's: %+v", s)
		}
		// The provider holds the pods the API server binds to the node,
		// give or take those being replaced at the sample's moment.
		if s.ProviderPods < pods-3 || s.ProviderPods > pods+3 {
			t.Errorf("the provider reported %v pods at %.0f s, want about %d", s.ProviderPods, s.Seconds, pods)
		}
	}
}
