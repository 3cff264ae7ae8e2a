package skew

import (
	"fmt"
	"io"
	"strings"
)

// WriteMatrix writes the outcomes as Markdown: a summary row per release; a
// row per suite with a column per release (passed, and any failed or not
// applicable); then every failure and not-applicable test with its reason.
func WriteMatrix(w io.Writer, suites []Suite, releases []Release) {
	fmt.Fprintln(w, "| Kubernetes | passed | failed | not applicable | bench (pods/s; ceiling; p50, p99) | minutes | commit |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- | ---: | --- |")
	var tested []Release
	for _, r := range releases {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | – | – | – | not built: %s | – | %s |\n", r.Version, oneLine(r.Error), r.Commit)
			continue
		}
		tested = append(tested, r)
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %.0f | %s |\n", r.Version,
			r.Count(Passed), r.Count(Failed), r.Count(NotApplicable), benchCell(r.Bench), r.Seconds/60, r.Commit)
	}
	if len(tested) == 0 {
		return
	}
	fmt.Fprint(w, "\nTests passed, by package (+ failed, + not applicable):\n\n")
	fmt.Fprint(w, "| what | package |")
	for _, r := range tested {
		fmt.Fprintf(w, " %s |", r.Version)
	}
	fmt.Fprint(w, "\n| --- | --- |")
	for range tested {
		fmt.Fprint(w, " ---: |")
	}
	fmt.Fprintln(w)
	for _, s := range suites {
		fmt.Fprintf(w, "| %s | `%s` |", s.Area, strings.TrimPrefix(s.Package, "./"))
		for _, r := range tested {
			in := Release{Tests: r.testsOf(s.Package)}
			cell := fmt.Sprint(in.Count(Passed))
			if n := in.Count(Failed); n > 0 {
				cell += fmt.Sprintf(" + %d failed", n)
			}
			if n := in.Count(NotApplicable); n > 0 {
				cell += fmt.Sprintf(" + %d n/a", n)
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	first := true
	for _, r := range tested {
		for _, t := range r.Tests {
			if t.Outcome != Failed {
				continue
			}
			if first {
				fmt.Fprint(w, "\nFailed:\n\n")
				first = false
			}
			name := t.Test
			if name == "" {
				name = "(the package)"
			}
			fmt.Fprintf(w, "- %s `%s` %s: %s\n", r.Version, shortPackage(t.Package), name, oneLine(t.Reason))
		}
	}
	writeNotApplicable(w, tested)
}

// writeNotApplicable lists each test not applicable somewhere once, with what
// it needs and the releases it skipped on.
func writeNotApplicable(w io.Writer, releases []Release) {
	type skip struct{ pkg, test, why string }
	var order []skip
	on := map[skip][]string{}
	for _, r := range releases {
		for _, t := range r.Tests {
			if t.Outcome != NotApplicable {
				continue
			}
			why := t.Reason
			if i := strings.Index(why, "not applicable: "); i >= 0 {
				why = why[i+len("not applicable: "):]
			}
			if i := strings.LastIndex(why, "; the control plane is "); i >= 0 {
				why = why[:i]
			}
			k := skip{shortPackage(t.Package), t.Test, why}
			if on[k] == nil {
				order = append(order, k)
			}
			on[k] = append(on[k], r.Version)
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprint(w, "\nNot applicable:\n\n")
	for _, k := range order {
		fmt.Fprintf(w, "- `%s` %s: %s (on %s)\n", k.pkg, k.test, oneLine(k.why), strings.Join(on[k], ", "))
	}
}

// testsOf returns r's results of the suite package pkg (./pod is …/pod).
func (r Release) testsOf(pkg string) []TestResult {
	var out []TestResult
	for _, t := range r.Tests {
		if t.Package == pkg || strings.HasSuffix(t.Package, strings.TrimPrefix(pkg, ".")) {
			out = append(out, t)
		}
	}
	return out
}

func benchCell(b *Bench) string {
	switch {
	case b == nil:
		return "not run"
	case b.Error != "":
		return "failed: " + oneLine(b.Error)
	}
	return fmt.Sprintf("%.0f; %.0f; %.0f ms, %.0f ms", b.PodsPerS, b.CeilingPodsPerS, b.P50ms, b.P99ms)
}

func shortPackage(p string) string {
	return strings.TrimPrefix(p, "github.com/vkubelet/vkubelet/")
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "\\|")
}
