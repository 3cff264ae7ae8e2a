package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/skew"
)

func newSkewCommand() *cobra.Command {
	var (
		versions  []string
		packages  []string
		benchPods int
		dir       string
		timeout   time.Duration
		from      []string
	)
	cmd := &cobra.Command{
		Use:   "skew",
		Short: "Run the node's wire-facing tests and a benchmark against every Kubernetes release the lab builds, and print the matrix",
		Long: `skew tests vkubelet against each Kubernetes release in --versions (default:
every release the lab can build), one after the other: it builds the release's
control plane, kubectl and kube-proxy into the cache if they are not there
(about 10 minutes each the first time), runs the integration tests that touch
the wire and the protocols (pods and their statuses, watches and relists,
tokens, CSRs and the approver, leases, the kubelet API through the API server
with the release's kubectl, the chart, upstream virtual-kubelet's mock) with
$` + controlplane.KubernetesVersionEnv + ` naming the release, and then
` + "`vkubeletctl bench --pods N`" + ` as a smoke figure. Run it from a vkubelet checkout
(the tests are go test's).

It prints a Markdown matrix: per release, the tests passed, failed and not
applicable (a test skips itself when the release lacks what it needs and says
what), and for each failure the first lines it reported. The logs and the
results as JSON go to --dir. skew exits with status 1 if any test failed.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(from) > 0 {
				return printSkewResults(cmd, from)
			}
			repo, err := os.Getwd()
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(repo, "internal", "lab", "skew")); err != nil {
				return fmt.Errorf("skew runs the tests of a vkubelet checkout: run it from the repository's root (%s is not)", repo)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if dir == "" {
				dir = filepath.Join("bin", "skew", time.Now().UTC().Format("20060102T150405Z"))
			}
			suites := skew.DefaultSuites
			if len(packages) > 0 {
				suites = nil
				for _, s := range skew.DefaultSuites {
					for _, p := range packages {
						if strings.TrimPrefix(s.Package, "./") == strings.TrimPrefix(p, "./") {
							suites = append(suites, s)
						}
					}
				}
				if len(suites) == 0 {
					return fmt.Errorf("--packages %s: none of skew's packages", strings.Join(packages, ","))
				}
			}
			releases, runErr := skew.Run(cmd.Context(), skew.Config{
				Versions: versions, Suites: suites, Repo: repo,
				BenchPods: benchPods, Vkubeletctl: self,
				LogDir: dir, TestTimeout: timeout, Out: cmd.ErrOrStderr(),
			})
			if b, err := json.MarshalIndent(releases, "", "  "); err == nil {
				_ = os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644)
			}
			var matrix strings.Builder
			skew.WriteMatrix(&matrix, suites, releases)
			_ = os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(matrix.String()), 0o644)
			fmt.Fprint(cmd.OutOrStdout(), matrix.String())
			fmt.Fprintf(cmd.ErrOrStderr(), "skew: logs, results.json and matrix.md in %s\n", dir)
			if runErr != nil {
				return runErr
			}
			for _, r := range releases {
				if r.Error != "" || r.Count(skew.Failed) > 0 || (r.Bench != nil && r.Bench.Error != "") {
					return fmt.Errorf("skew: not every release passed (see the matrix)")
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&versions, "versions", controlplane.KubernetesVersions(), "the Kubernetes releases to test, comma-separated")
	f.StringSliceVar(&packages, "packages", nil, "only these of skew's packages (e.g. ./pod,./node); default: all")
	f.IntVar(&benchPods, "bench-pods", 1000, "pods of each release's `bench` smoke run; 0: no benchmark")
	f.StringVar(&dir, "dir", "", "where the logs, results.json and matrix.md go (default bin/skew/<time>)")
	f.DurationVar(&timeout, "test-timeout", 30*time.Minute, "go test -timeout of each package, per release")
	f.StringSliceVar(&from, "from", nil, "run nothing: print one matrix of these earlier runs' results.json files (releases in the order given)")
	return cmd
}

// printSkewResults prints the matrix of earlier runs' results, one file each.
func printSkewResults(cmd *cobra.Command, files []string) error {
	var releases []skew.Release
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var rs []skew.Release
		if err := json.Unmarshal(b, &rs); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		releases = append(releases, rs...)
	}
	skew.WriteMatrix(cmd.OutOrStdout(), skew.DefaultSuites, releases)
	return nil
}
