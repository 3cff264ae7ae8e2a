package skew

import (
	"strings"
	"testing"
)

func TestTheMatrixNamesEveryFailureAndEveryTestNotApplicable(t *testing.T) {
	suites := []Suite{{Area: "pods", Package: "./pod"}}
	releases := []Release{
		{Version: "v1.30.14", Tests: []TestResult{
			{Package: "github.com/vkubelet/vkubelet/pod", Test: "TestA", Outcome: Passed},
			{Package: "github.com/vkubelet/vkubelet/pod", Test: "TestB", Outcome: Failed, Reason: "b_test.go:3: the pod never ran"},
			{Package: "github.com/vkubelet/vkubelet/pod", Test: "TestC", Outcome: NotApplicable, Reason: "not applicable: resize needs Kubernetes 1.33"},
		}, Bench: &Bench{Pods: 1000, PodsPerS: 150, CeilingPodsPerS: 140, P50ms: 2000, P99ms: 4000}, Seconds: 480, Commit: "abc1234"},
		{Version: "v1.29.0", Error: "Kubernetes v1.29.0 cannot be built here"},
	}
	var b strings.Builder
	WriteMatrix(&b, suites, releases)
	out := b.String()
	for _, want := range []string{
		"| v1.30.14 | 1 | 1 | 1 | 150; 140; 2000 ms, 4000 ms | 8 | abc1234 |",
		"| v1.29.0 | – | – | – | not built: Kubernetes v1.29.0 cannot be built here | – |  |",
		"| pods | `pod` | 1 + 1 failed + 1 n/a |",
		"- v1.30.14 `pod` TestB: b_test.go:3: the pod never ran",
		"- `pod` TestC: resize needs Kubernetes 1.33 (on v1.30.14)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the matrix lacks %q:\n%s", want, out)
		}
	}
}
