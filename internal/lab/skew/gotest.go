package skew

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"strings"
)

// Outcome is what a test came to.
type Outcome string

const (
	Passed        Outcome = "passed"
	Failed        Outcome = "failed"
	NotApplicable Outcome = "n/a" // the test skipped itself: the release lacks what it needs
)

// TestResult is one top-level test's outcome in one release.
type TestResult struct {
	Package string  `json:"package"`
	Test    string  `json:"test"` // empty: the package itself (a build failure, TestMain's)
	Outcome Outcome `json:"outcome"`
	// Reason is, for a failure, the first lines the test reported; for a skip,
	// what it said it needs.
	Reason  string  `json:"reason,omitempty"`
	Seconds float64 `json:"seconds"`
}

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// parseTestJSON reads `go test -json` output and returns one result per top-level
// test, and one per package that failed outside any test, in package then test
// order. Subtests count in their parent's outcome and reason.
func parseTestJSON(r io.Reader) ([]TestResult, error) {
	output := map[testKey][]string{}
	results := map[testKey]*TestResult{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // go's own lines (a build error's) are in the package's output too
		}
		top := e.Test
		if i := strings.IndexByte(top, '/'); i >= 0 {
			top = top[:i]
		}
		k := testKey{e.Package, top}
		switch e.Action {
		case "output":
			output[k] = append(output[k], e.Output)
		case "pass", "fail", "skip":
			if e.Test != top {
				continue // a subtest: its parent decides
			}
			o := map[string]Outcome{"pass": Passed, "fail": Failed, "skip": NotApplicable}[e.Action]
			if e.Test == "" && o != Failed {
				continue // a package that passed or had no tests says nothing more
			}
			results[k] = &TestResult{Package: e.Package, Test: e.Test, Outcome: o, Seconds: e.Elapsed}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []TestResult
	for k, r := range results {
		if r.Test == "" && hasFailedTests(results, k.pkg) {
			// A package fails when one of its tests does; its own line adds
			// nothing then.
			continue
		}
		switch r.Outcome {
		case Failed:
			r.Reason = failureReason(output[k])
		case NotApplicable:
			r.Reason = skipReason(output[k])
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Test < out[j].Test
	})
	return out, nil
}

// testKey names a top-level test; an empty test, its package.
type testKey struct{ pkg, test string }

// hasFailedTests reports whether a test of pkg failed.
func hasFailedTests(results map[testKey]*TestResult, pkg string) bool {
	for k, r := range results {
		if k.pkg == pkg && k.test != "" && r.Outcome == Failed {
			return true
		}
	}
	return false
}

// failureReason keeps the lines a failing test wrote through t.Error or
// t.Fatal (they start with file:line), the first few; else the output's end.
func failureReason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "" {
			continue
		}
		if i := strings.Index(t, ".go:"); i > 0 && !strings.Contains(t[:i], " ") {
			said = append(said, t)
		}
	}
	if len(said) == 0 {
		for _, l := range lines {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
				said = append(said, t)
			}
		}
		if len(said) > 5 {
			said = said[len(said)-5:]
		}
	}
	if len(said) > 3 {
		said = said[:3]
	}
	return clip(strings.Join(said, " / "), 400)
}

// skipReason is the last thing a skipped test said before it skipped.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		t := strings.TrimSpace(lines[i])
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		return clip(t, 300)
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
