package e2econformance

import (
	"fmt"
	"sort"
	"strings"
)

// Column is one node's run of the selection: a column of the comparison.
type Column struct {
	// Name is the column's heading ("kubelet", "vkubelet CRI", "kube provider").
	Name string
	// Node is the node the run was against; its report is in <dir>/<Node>.
	Node string
	// Reference marks the real kubelet's column, the one the others are
	// measured against.
	Reference bool
	Results   []Result
}

// Compare is the Markdown table of the columns, test by test: each column's
// outcome, then why the virtual nodes' runs did not pass. If one column is the
// reference, it follows with how many of the tests the reference passes each
// other column passes too (the measure).
func Compare(columns ...Column) string {
	byName := make([]map[string]Result, len(columns))
	seen := map[string]bool{}
	var names []string
	for i, c := range columns {
		byName[i] = map[string]Result{}
		for _, r := range c.Results {
			byName[i][r.Name] = r
			if !seen[r.Name] {
				seen[r.Name] = true
				names = append(names, r.Name)
			}
		}
	}
	sort.Strings(names)
	escape := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
	var b strings.Builder
	b.WriteString("| test |")
	rule := "| --- |"
	for _, c := range columns {
		b.WriteString(" " + c.Name + " |")
		rule += " --- |"
	}
	b.WriteString(" explanation |\n" + rule + " --- |\n")
	// Explanations name their column when more than one column may give one.
	virtual := 0
	for _, c := range columns {
		if !c.Reference {
			virtual++
		}
	}
	for _, n := range names {
		b.WriteString("| " + escape(n) + " |")
		var why []string
		for i, c := range columns {
			r, ok := byName[i][n]
			if !ok {
				b.WriteString(" not run |")
				continue
			}
			b.WriteString(" " + string(r.Outcome) + " |")
			if !c.Reference && r.Outcome != Passed && r.Message != "" {
				if virtual > 1 {
					why = append(why, c.Name+": "+r.Message)
				} else {
					why = append(why, r.Message)
				}
			}
		}
		b.WriteString(" " + escape(strings.Join(why, "; ")) + " |\n")
	}
	var measures []string
	for ri, ref := range columns {
		if !ref.Reference {
			continue
		}
		for i, c := range columns {
			if c.Reference {
				continue
			}
			refPassed, both := 0, 0
			for n, r := range byName[ri] {
				if r.Outcome != Passed {
					continue
				}
				refPassed++
				if o, ok := byName[i][n]; ok && o.Outcome == Passed {
					both++
				}
			}
			if refPassed > 0 {
				measures = append(measures, fmt.Sprintf("%s passes %d of the %d tests the %s passes (%.1f %%).",
					c.Name, both, refPassed, ref.Name, 100*float64(both)/float64(refPassed)))
			}
		}
	}
	if len(measures) > 0 {
		b.WriteString("\n" + strings.Join(measures, "\n\n") + "\n")
	}
	return b.String()
}
