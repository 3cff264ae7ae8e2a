package skew

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/bench"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// Config says what to run.
type Config struct {
	// Versions are the releases, each one of controlplane.KubernetesVersions.
	Versions []string
	// Suites are the tests run against each release.
	Suites []Suite
	// Repo is the repository whose tests run (go test's working directory).
	Repo string
	// BenchPods, if above zero, runs `vkubeletctl bench --pods BenchPods` against
	// each release with Vkubeletctl.
	BenchPods   int
	Vkubeletctl string
	// LogDir receives each release's go test -json stream and bench output.
	LogDir string
	// TestTimeout bounds each release's go test run (go test -timeout).
	TestTimeout time.Duration
	// Out receives progress.
	Out io.Writer
}

// Release is the outcome for one Kubernetes release.
type Release struct {
	Version string `json:"version"`
	// Commit is the repository's commit the tests ran at (git describe
	// --always --dirty).
	Commit string       `json:"commit,omitempty"`
	Tests  []TestResult `json:"tests"`
	// Error says why the release could not be tested at all (it did not build).
	Error string `json:"error,omitempty"`
	// Bench is `vkubeletctl bench --json`'s figures, if run.
	Bench *Bench `json:"bench,omitempty"`
	// Seconds is the release's wall time, build aside.
	Seconds float64 `json:"seconds"`
}

// Bench holds the smoke figures of one release's benchmark run.
type Bench struct {
	Pods            int     `json:"pods"`
	PodsPerS        float64 `json:"pods_per_s"`
	CeilingPodsPerS float64 `json:"ceiling_pods_per_s"`
	P50ms           float64 `json:"p50_ms"`
	P99ms           float64 `json:"p99_ms"`
	Error           string  `json:"error,omitempty"`
}

// Count returns how many of r's tests came to o.
func (r Release) Count(o Outcome) int {
	n := 0
	for _, t := range r.Tests {
		if t.Outcome == o {
			n++
		}
	}
	return n
}

// Run tests each release in turn, building its control plane first if the
// cache lacks it, and returns the outcomes in cfg.Versions' order. A release that
// does not build is reported with its error and the rest go on.
func Run(ctx context.Context, cfg Config) ([]Release, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	var out []Release
	for _, v := range cfg.Versions {
		r := Release{Version: v}
		fmt.Fprintf(cfg.Out, "skew: Kubernetes %s\n", v)
		if _, err := controlplane.EnsureKubernetes(ctx, v, cfg.Out); err != nil {
			r.Error = err.Error()
			out = append(out, r)
			fmt.Fprintf(cfg.Out, "skew: %s cannot be tested: %v\n", v, err)
			continue
		}
		start := time.Now()
		r.Commit = commitOf(ctx, cfg.Repo)
		tests, err := runTests(ctx, cfg, v)
		if err != nil {
			return out, err
		}
		r.Tests = tests
		if cfg.BenchPods > 0 {
			r.Bench = runBench(ctx, cfg, v)
		}
		r.Seconds = time.Since(start).Seconds()
		fmt.Fprintf(cfg.Out, "skew: %s: %d passed, %d failed, %d not applicable in %s\n",
			v, r.Count(Passed), r.Count(Failed), r.Count(NotApplicable), time.Since(start).Round(time.Second))
		out = append(out, r)
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// releaseEnv is the environment of a child that must use release v.
func releaseEnv(v string) []string {
	return append(os.Environ(), controlplane.KubernetesVersionEnv+"="+v, "CI=true")
}

func runTests(ctx context.Context, cfg Config, v string) ([]TestResult, error) {
	var all []TestResult
	logPath := filepath.Join(cfg.LogDir, v+".test.json")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	// One go test per suite, one after the other: each has its own -run, and a
	// busy machine's timing is then a single package's.
	for _, s := range cfg.Suites {
		args := []string{"test", "-json", "-count=1", "-timeout", cfg.TestTimeout.String()}
		if s.Run != "" {
			args = append(args, "-run", s.Run)
		}
		args = append(args, s.Package)
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = cfg.Repo, releaseEnv(v)
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, log), log
		started := time.Now()
		runErr := cmd.Run()
		if ctx.Err() != nil {
			return all, ctx.Err()
		}
		results, err := parseTestJSON(&stdout)
		if err != nil {
			return all, err
		}
		if len(results) == 0 && runErr != nil {
			// go test failed before any test ran and said nothing as JSON.
			results = []TestResult{{Package: s.Package, Outcome: Failed, Reason: clip(runErr.Error(), 300)}}
		}
		fmt.Fprintf(cfg.Out, "skew: %s %s: %s\n", v, s.Package, summary(results, time.Since(started)))
		all = append(all, results...)
	}
	return all, nil
}

func summary(rs []TestResult, took time.Duration) string {
	r := Release{Tests: rs}
	return fmt.Sprintf("%d passed, %d failed, %d n/a (%s)", r.Count(Passed), r.Count(Failed), r.Count(NotApplicable), took.Round(time.Second))
}

// runBench runs the benchmark's smoke measurement against release v.
func runBench(ctx context.Context, cfg Config, v string) *Bench {
	b := &Bench{Pods: cfg.BenchPods}
	logPath := filepath.Join(cfg.LogDir, v+".bench.log")
	log, err := os.Create(logPath)
	if err != nil {
		b.Error = err.Error()
		return b
	}
	defer log.Close()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, cfg.Vkubeletctl, "bench", "--pods", strconv.Itoa(cfg.BenchPods), "--json")
	cmd.Dir, cmd.Env = cfg.Repo, releaseEnv(v)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, log), log
	if err := cmd.Run(); err != nil {
		b.Error = fmt.Sprintf("%v (log: %s)", err, logPath)
		return b
	}
	var res bench.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		b.Error = fmt.Sprintf("reading bench's JSON: %v (log: %s)", err, logPath)
		return b
	}
	b.PodsPerS, b.CeilingPodsPerS, b.P50ms, b.P99ms = res.PodsPerS, res.CeilingPodsPerS, res.P50ms, res.P99ms
	fmt.Fprintf(cfg.Out, "skew: %s bench --pods %d: %.0f pods/s (ceiling %.0f), p50 %.0f ms, p99 %.0f ms\n",
		v, b.Pods, b.PodsPerS, b.CeilingPodsPerS, b.P50ms, b.P99ms)
	return b
}

// commitOf names the commit the repository at dir is checked out at, with
// -dirty if it has changes; empty if git cannot tell.
func commitOf(ctx context.Context, dir string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=7")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
