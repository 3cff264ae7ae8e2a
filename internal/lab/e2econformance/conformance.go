package e2econformance

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
	// each node's report in <Dir>/<node>/ (e2e.log, junit_01.xml, results.txt).
	// It is emptied first.
	Dir string
	// Vkubeletctl is the vkubeletctl binary that starts the cluster (up).
	Vkubeletctl string
	// Selection picks the tests.
	Selection Selection
	// Timeout bounds each run of the suite, not the cluster's start or the builds.
	Timeout time.Duration
	// Procs is how many ginkgo processes run the tests side by side.
	Procs int
	// SkipCRI leaves out the run on the vkubelet CRI node (Node), which
	// otherwise comes first.
	SkipCRI bool
	// Kubelet, if set, runs the selection on a real kubelet joined to the same
	// cluster (ReferenceNode).
	Kubelet bool
	// Kube, if set, runs the selection last on a vkubelet node with the kube
	// provider (KubeNode), offloading to a second cluster (StartKube).
	Kube bool
	// Vkubelet is the vkubelet binary the kube provider's node runs.
	Vkubelet string
	// NodeLogLevel is the virtual nodes' log level (the CRI node's log is in
	// up.log, the kube provider's node's in <Dir>/<KubeNode>/vkubelet.log).
	NodeLogLevel string
	// Out receives progress and the summary.
	Out io.Writer
}

// Node is the virtual node's name in the run's cluster.
const Node = "vkubelet-cri"

// The columns' headings in the comparison.
const (
	criColumn     = "vkubelet CRI"
	kubeletColumn = "kubelet"
	kubeColumn    = "kube provider"
)

// Run builds (or finds) the suite and its images, starts the cluster, and runs
// the selected tests against each node asked for, in turn: the vkubelet CRI
// node (unless SkipCRI), the reference kubelet (Kubelet), the kube provider's
// node (Kube), each with the others tainted out. It writes each node's results
// to Dir/<node>/results.txt and their summary to Out, and, with two columns or
// more, the comparison to Dir/comparison.md. It returns the columns run.
func Run(ctx context.Context, cfg Config) ([]Column, error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if cfg.SkipCRI && !cfg.Kubelet && !cfg.Kube {
		return nil, fmt.Errorf("no node to run the tests on: the CRI node left out, and neither the kubelet nor the kube provider asked for")
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
	// What goes once up has stopped containerd and with it the pods.
	var afterStop []func()
	defer func() {
		fmt.Fprintln(out, "conformance: stopping the cluster")
		cluster.Stop()
		for _, f := range afterStop {
			f()
		}
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
	var columns []Column
	if !cfg.SkipCRI {
		results, err := runOn(ctx, out, base, cfg, Node)
		if err != nil {
			return columns, err
		}
		columns = append(columns, Column{Name: criColumn, Node: Node, Results: results})
	}
	if !cfg.Kubelet && !cfg.Kube {
		return columns, nil
	}
	// The other nodes' runs: the virtual node is tainted out of them, without
	// the suite waiting for it.
	if err := taintOut(ctx, cluster, Node); err != nil {
		return columns, err
	}
	base.NonBlockingTaints += "," + notUnderTest
	if cfg.Kubelet {
		fmt.Fprintf(out, "conformance: starting the reference kubelet (log: %s)\n", filepath.Join(cfg.Dir, ReferenceNode, "kubelet.log"))
		kubelet, err := StartKubelet(ctx, cluster, e2e.Kubelet, filepath.Join(cfg.Dir, ReferenceNode), 3*time.Minute)
		if err != nil {
			return columns, fmt.Errorf("the reference kubelet: %w", err)
		}
		afterStop = append(afterStop, kubelet.RemoveCgroups)
		results, err := runOn(ctx, out, base, cfg, ReferenceNode)
		// A kubelet kills the pods it does not know on its containerd: the
		// target's kubelet and it cannot run side by side. Its node goes too,
		// which the suite would otherwise wait for.
		kubelet.Stop()
		if err != nil {
			return columns, err
		}
		columns = append([]Column{{Name: kubeletColumn, Node: ReferenceNode, Reference: true, Results: results}}, columns...)
		if cfg.Kube {
			if err := deleteNode(ctx, cluster, ReferenceNode); err != nil {
				return columns, err
			}
		}
	}
	if cfg.Kube {
		dir := filepath.Join(cfg.Dir, KubeNode)
		fmt.Fprintf(out, "conformance: starting the target cluster and node %s with the kube provider (log: %s)\n", KubeNode, filepath.Join(dir, "vkubelet.log"))
		kube, err := StartKube(ctx, cluster, KubeSetup{
			Vkubelet: cfg.Vkubelet, Kubelet: e2e.Kubelet, Dir: dir, LogLevel: cfg.NodeLogLevel, Out: out,
		}, 3*time.Minute)
		if err != nil {
			return columns, fmt.Errorf("the kube provider's node: %w", err)
		}
		afterStop = append(afterStop, kube.RemoveCgroups)
		results, err := runOn(ctx, out, base, cfg, KubeNode)
		running := kube.Running()
		kube.Stop()
		if err != nil {
			return columns, err
		}
		columns = append(columns, Column{Name: kubeColumn, Node: KubeNode, Results: results})
		if !running {
			return columns, fmt.Errorf("the kube provider's node or the target's kubelet exited during the run; see %s", dir)
		}
	}
	if len(columns) > 1 {
		if err := os.WriteFile(filepath.Join(cfg.Dir, "comparison.md"), []byte(Compare(columns...)), 0o644); err != nil {
			return columns, err
		}
		fmt.Fprintf(out, "conformance: the comparison is in %s\n", filepath.Join(cfg.Dir, "comparison.md"))
	}
	if !cluster.Running() {
		return columns, fmt.Errorf("vkubeletctl up exited during the run; see %s", cluster.Log)
	}
	return columns, nil
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
