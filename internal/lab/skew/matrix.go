package skew

import (
	"fmt"
	"io"
	"strings"
)

// WriteMatrix writes the outcomes as Markdown: a summary row per release, then
// per release a row per suite and every failure and not-applicable test with
// its reason.
func WriteMatrix(w io.Writer, suites []Suite, releases []Release) {
	fmt.Fprintln(w, "| Kubernetes | passed | failed | not applicable | bench (pods/s; ceiling; p50, p99) | minutes |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- | ---: |")
	for _, r := range releases {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | – | – | – | not built: %s | – |\n", r.Version, oneLine(r.Error))
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %.0f |\n", r.Version,
			r.Count(Passed), r.Count(Failed), r.Count(NotApplicable), benchCell(r.Bench), r.Seconds/60)
	}
	for _, r := range releases {
		if r.Error != "" {
			continue
		}
		fmt.Fprintf(w, "\n#### %s\n\n", r.Version)
		fmt.Fprintln(w, "| what | package | passed | failed | n/a |")
		fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: |")
		for _, s := range suites {
			in := Release{Tests: r.testsOf(s.Package)}
			fmt.Fprintf(w, "| %s | `%s` | %d | %d | %d |\n", s.Area, strings.TrimPrefix(s.Package, "./"),
				in.Count(Passed), in.Count(Failed), in.Count(NotApplicable))
		}
		for _, o := range []Outcome{Failed, NotApplicable} {
			first := true
			for _, t := range r.Tests {
				if t.Outcome != o {
					continue
				}
				if first {
					fmt.Fprintf(w, "\n%s:\n\n", map[Outcome]string{Failed: "Failed", NotApplicable: "Not applicable"}[o])
					first = false
				}
				name := t.Test
				if name == "" {
					name = "(the package)"
				}
				fmt.Fprintf(w, "- `%s` %s: %s\n", shortPackage(t.Package), name, oneLine(t.Reason))
			}
		}
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
