package skew

import (
	"strings"
	"testing"
)

func TestParseTestJSONKeepsEachTopLevelTestsOutcomeAndWhy(t *testing.T) {
	const stream = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA/sub","Output":"    a_test.go:12: the pod never became Ready\n"}
{"Action":"fail","Package":"p","Test":"TestA/sub","Elapsed":1}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":2}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: not applicable: pod resize needs Kubernetes 1.33 or later; the control plane is v1.32.11\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"pass","Package":"p","Test":"TestC","Elapsed":3}
{"Action":"fail","Package":"p","Elapsed":6}
{"Action":"output","Package":"q","Output":"testenv: starting the control plane: kube-apiserver exited\n"}
{"Action":"output","Package":"q","Output":"FAIL\tq\t0.5s\n"}
{"Action":"fail","Package":"q","Elapsed":0.5}
{"Action":"pass","Package":"r","Elapsed":0.5}
`
	got, err := parseTestJSON(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := []TestResult{
		{Package: "p", Test: "TestA", Outcome: Failed, Reason: "a_test.go:12: the pod never became Ready", Seconds: 2},
		{Package: "p", Test: "TestB", Outcome: NotApplicable, Reason: "b_test.go:3: not applicable: pod resize needs Kubernetes 1.33 or later; the control plane is v1.32.11"},
		{Package: "p", Test: "TestC", Outcome: Passed, Seconds: 3},
		{Package: "q", Outcome: Failed, Reason: "testenv: starting the control plane: kube-apiserver exited / FAIL\tq\t0.5s", Seconds: 0.5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}
