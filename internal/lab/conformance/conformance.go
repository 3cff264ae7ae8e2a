package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// Config is one conformance run.
type Config struct {
	// Dir holds the run: up.log and the cluster's state, the repo list, and
	// the suite's report in vkubelet-cri/ (e2e.log, junit_01.xml, results.txt).
	// It is emptied first.
	Dir string
	// Vkubeletctl is the vkubeletctl binary that starts the cluster (up).
	Vkubeletctl string
	// Selection picks the tests.
	Selection Selection
	// Timeout bounds the suite's run, not the cluster's start or the builds.
	Timeout time.Duration
	// Procs is how many ginkgo processes run the tests side by side.
	Procs int
	// Kubelet, if set, runs the selection a second time on a real kubelet
	// joined to the same cluster (ReferenceNode), and writes the comparison
	// to Dir/comparison.md.
	Kubelet bool
	// NodeLogLevel is the virtual node's log level (its log is in up.log).
	NodeLogLevel string
	// Out receives progress and the summary.
	Out io.Writer
}

// Node is the virtual node's name in the run's cluster.
const Node = "vkubelet-cri"

// Run builds (or finds) the suite and its images, starts the cluster, runs the
// selected tests against the vkubelet CRI node and returns their results,
// having written them to Dir/<node>/results.txt and the summary to Out.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	bins, err := controlplane.EnsureBinaries(ctx, out)
	if err != nil {
		return nil, err
	}
	e2e, err := controlplane.EnsureE2E(ctx, out)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	fmt.Fprintf(out, "conformance: starting the cluster (vkubeletctl up --provider cri; log: %s)\n", filepath.Join(cfg.Dir, "up.log"))
	cluster, err := StartCluster(ctx, cfg.Vkubeletctl, cfg.Dir, Node, cfg.NodeLogLevel, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	defer func() {
		fmt.Fprintln(out, "conformance: stopping the cluster")
		cluster.Stop()
	}()
	fmt.Fprintf(out, "conformance: cluster ready in %s; pushing the test images to %s\n", time.Since(started).Round(time.Second), cluster.Registry)
	if err := PushTestImages(cluster.Registry, cluster.Busybox, e2e); err != nil {
		return nil, err
	}
	repoList := filepath.Join(cfg.Dir, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(RepoList(cluster.Registry)), 0o644); err != nil {
		return nil, err
	}
	base := Suite{
		Binary: e2e.Test, Kubeconfig: cluster.Kubeconfig, Kubectl: bins.Kubectl, RepoList: repoList,
		Timeout: cfg.Timeout, Procs: cfg.Procs, Ginkgo: e2e.Ginkgo, NonBlockingTaints: defaultNonBlockingTaints,
	}
	results, err := runOn(ctx, out, base, cfg, Node)
	if err != nil || !cfg.Kubelet {
		return results, err
	}
	// The same tests on a real kubelet joined to the same cluster: the virtual
	// node is tainted out of them, without the suite waiting for it.
	if err := taintOut(ctx, cluster, Node); err != nil {
		return results, err
	}
	fmt.Fprintf(out, "conformance: starting the reference kubelet (log: %s)\n", filepath.Join(cfg.Dir, ReferenceNode, "kubelet.log"))
	kubelet, err := StartKubelet(ctx, cluster, e2e.Kubelet, filepath.Join(cfg.Dir, ReferenceNode), 3*time.Minute)
	if err != nil {
		return results, fmt.Errorf("the reference kubelet: %w", err)
	}
	defer kubelet.Stop()
	base.NonBlockingTaints += "," + notUnderTest
	reference, err := runOn(ctx, out, base, cfg, ReferenceNode)
	if err != nil {
		return results, err
	}
	table := Compare(reference, results)
	if err := os.WriteFile(filepath.Join(cfg.Dir, "comparison.md"), []byte(table), 0o644); err != nil {
		return results, err
	}
	fmt.Fprintf(out, "conformance: the comparison is in %s\n", filepath.Join(cfg.Dir, "comparison.md"))
	if !cluster.Running() {
		return results, fmt.Errorf("vkubeletctl up exited during the run; see %s", cluster.Log)
	}
	return results, nil
}

// defaultNonBlockingTaints is e2e.test's own default: control-plane nodes.
const defaultNonBlockingTaints = "node-role.kubernetes.io/control-plane"

// runOn runs the selection with node under test, its report in cfg.Dir/node.
func runOn(ctx context.Context, out io.Writer, s Suite, cfg Config, node string) ([]Result, error) {
	s.ReportDir = filepath.Join(cfg.Dir, node)
	fmt.Fprintf(out, "conformance: running e2e.test against node %s (output: %s)\n", node, filepath.Join(s.ReportDir, "e2e.log"))
	ran := time.Now()
	selected, err := s.Selected(ctx, cfg.Selection, filepath.Join(s.ReportDir, "selection"))
	if err != nil {
		return nil, err
	}
	results, err := s.Run(ctx, cfg.Selection)
	if err != nil {
		return nil, err
	}
	results = withNotRun(results, selected)
	summary := Summary(node, results, time.Since(ran))
	if err := os.WriteFile(filepath.Join(s.ReportDir, "results.txt"), []byte(summary), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprint(out, summary)
	if ctx.Err() != nil {
		return results, fmt.Errorf("the run on node %s was interrupted: %w", node, ctx.Err())
	}
	return results, nil
}

// withNotRun adds to results a NotRun result for each selected test they lack:
// those a stopped run did not reach.
func withNotRun(results []Result, selected []string) []Result {
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Name] = true
	}
	for _, n := range selected {
		if !seen[n] {
			results = append(results, Result{Name: n, Outcome: NotRun})
		}
	}
	return results
}

// Summary is the results as text: one line per test, sorted by name, then the
// counts of each outcome.
func Summary(node string, results []Result, took time.Duration) string {
	sorted := append([]Result(nil), results...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	counts := map[Outcome]int{}
	for _, r := range sorted {
		counts[r.Outcome]++
		line := fmt.Sprintf("%-17s %s (%s)", r.Outcome, r.Name, r.Duration.Round(100*time.Millisecond))
		if r.Message != "" && r.Outcome != Passed {
			line += "\n                  " + r.Message
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "node %s: %d tests in %s: %d passed, %d failed, %d image unavailable, %d skipped, %d interrupted, %d not run\n",
		node, len(sorted), took.Round(time.Second), counts[Passed], counts[Failed], counts[ImageUnavailableOutcome], counts[Skipped], counts[Interrupted], counts[NotRun])
	return b.String()
}
