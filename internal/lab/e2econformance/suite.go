package e2econformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Selection says which of the suite's tests run, in ginkgo's terms: specs whose
// full text matches Focus and not Skip, and whose labels satisfy LabelFilter.
type Selection struct {
	Focus       string
	Skip        string
	LabelFilter string
}

// DefaultLabelFilter is the selection: Kubernetes' conformance and node
// conformance tests, without those that need the whole cluster to themselves
// (Serial), break it (Disruptive), are known to be unreliable (Flaky) or need a
// feature the cluster does not enable (Feature:*).
const DefaultLabelFilter = `(Conformance || NodeConformance) && !Serial && !Disruptive && !Flaky && !/^Feature:/`

// DefaultFocus keeps the sigs whose tests a single node answers for.
const DefaultFocus = `\[sig-(node|network|storage)\]`

// Suite is one run of e2e.test against a cluster.
type Suite struct {
	// Binary is e2e.test.
	Binary string
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// Kubectl is the kubectl the kubectl-driven tests run.
	Kubectl string
	// RepoList is the KUBE_TEST_REPO_LIST file (RepoList).
	RepoList string
	// ReportDir receives junit_01.xml and the suite's own artefacts; e2e.log
	// there is its output.
	ReportDir string
	// Timeout bounds the whole run (ginkgo's --timeout).
	Timeout time.Duration
	// Procs is how many processes run the specs side by side, through Ginkgo
	// (the ginkgo command); 1 runs e2e.test alone. The selection has no
	// [Serial] tests, so they may share the cluster.
	Procs  int
	Ginkgo string
	// NonBlockingTaints are the keys of taints that keep a node out of the
	// tests without the suite waiting for it (the node not under test).
	NonBlockingTaints string
}

// frameworkArgs are e2e.test's own flags: the cluster, where reports go, no
// cloud provider, no log collection over SSH.
func (s Suite) frameworkArgs() []string {
	return []string{
		"--kubeconfig=" + s.Kubeconfig,
		"--kubectl-path=" + s.Kubectl,
		"--provider=skeleton",
		"--report-dir=" + s.ReportDir,
		"--e2e-output-dir=" + s.ReportDir,
		"--dump-logs-on-failure=false",
		"--non-blocking-taints=" + s.NonBlockingTaints,
	}
}

// ginkgoArgs are ginkgo's flags for sel, each prefixed with prefix: "--" for
// the ginkgo command, "--ginkgo." for e2e.test run alone.
func (s Suite) ginkgoArgs(prefix string, sel Selection) []string {
	args := []string{prefix + "no-color", prefix + "timeout=" + s.Timeout.String()}
	for _, f := range []struct{ flag, v string }{{"focus", sel.Focus}, {"skip", sel.Skip}, {"label-filter", sel.LabelFilter}} {
		if f.v != "" {
			args = append(args, prefix+f.flag+"="+f.v)
		}
	}
	return args
}

// command is e2e.test alone for one process, or under the ginkgo command for
// several.
func (s Suite) command(ctx context.Context, sel Selection) *exec.Cmd {
	if s.Procs <= 1 || s.Ginkgo == "" {
		return exec.CommandContext(ctx, s.Binary, append(s.frameworkArgs(), s.ginkgoArgs("--ginkgo.", sel)...)...)
	}
	args := append(s.ginkgoArgs("--", sel), fmt.Sprintf("--procs=%d", s.Procs), s.Binary, "--")
	return exec.CommandContext(ctx, s.Ginkgo, append(args, s.frameworkArgs()...)...)
}

// Run runs the selected tests, with the suite's output in ReportDir/e2e.log,
// and returns the results read from its JUnit report. A run in which tests
// failed is no error; a run that produced no report is.
func (s Suite) Run(ctx context.Context, sel Selection) ([]Result, error) {
	if err := os.MkdirAll(s.ReportDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.ReportDir, "e2e.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := s.command(ctx, sel)
	fmt.Fprintf(log, "%s\n", strings.Join(cmd.Args, " "))
	cmd.Dir = s.ReportDir
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+s.RepoList)
	cmd.Stdout, cmd.Stderr = log, log
	// The suite ends its specs itself when its timeout passes; a cancelled run
	// asks it to stop in the same way (ginkgo reports on SIGINT).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	runErr := cmd.Run()
	results, err := ReadJUnit(filepath.Join(s.ReportDir, "junit_01.xml"))
	if err != nil {
		return nil, fmt.Errorf("e2e.test (%v) left no report; its output is in %s: %w", runErr, logPath, err)
	}
	return results, nil
}

// Selected lists the tests sel picks, by a dry run of the suite (which starts
// nothing and needs no cluster), its report in dir.
func (s Suite) Selected(ctx context.Context, sel Selection, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"--report-dir=" + dir, "--ginkgo.dry-run"}, s.ginkgoArgs("--ginkgo.", sel)...)
	cmd := exec.CommandContext(ctx, s.Binary, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("e2e.test --ginkgo.dry-run: %w: %s", err, tail(string(out), 10))
	}
	results, err := ReadJUnit(filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(results))
	for _, r := range results {
		names = append(names, r.Name)
	}
	return names, nil
}

// tail is the last n lines of text.
func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
