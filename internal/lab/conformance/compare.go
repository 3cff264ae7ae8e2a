package conformance

import (
	"fmt"
	"sort"
	"strings"
)

// Compare is the Markdown table of both runs, test by test: the reference
// kubelet's outcome and the virtual node's, then how many of the tests the
// kubelet passes the virtual node passes too (the measure).
func Compare(kubelet, vkubelet []Result) string {
	byName := func(rs []Result) map[string]Result {
		m := map[string]Result{}
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	k, v := byName(kubelet), byName(vkubelet)
	var names []string
	for n := range k {
		names = append(names, n)
	}
	for n := range v {
		if _, ok := k[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| test | kubelet | vkubelet CRI | explanation |\n| --- | --- | --- | --- |\n")
	kubeletPassed, both := 0, 0
	for _, n := range names {
		kr, kok := k[n]
		vr, vok := v[n]
		cell := func(r Result, ok bool) string {
			if !ok {
				return "not run"
			}
			return string(r.Outcome)
		}
		why := ""
		if vok && vr.Outcome != Passed {
			why = strings.ReplaceAll(vr.Message, "|", "\\|")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.ReplaceAll(n, "|", "\\|"), cell(kr, kok), cell(vr, vok), why)
		if kok && kr.Outcome == Passed {
			kubeletPassed++
			if vok && vr.Outcome == Passed {
				both++
			}
		}
	}
	if kubeletPassed > 0 {
		fmt.Fprintf(&b, "\nvkubelet CRI passes %d of the %d tests the kubelet passes (%.1f %%).\n",
			both, kubeletPassed, 100*float64(both)/float64(kubeletPassed))
	}
	return b.String()
}
