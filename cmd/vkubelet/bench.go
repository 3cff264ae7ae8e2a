package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/bench"
	"github.com/vkubelet/vkubelet/internal/controlplane"
)

func newBenchCommand() *cobra.Command {
	var (
		cfg        bench.Config
		asJSON     bool
		kubeconfig string
		runs       int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pod start/stop throughput, latency and cost of a node, next to the API server's ceiling",
		Long: `bench first measures the ceiling: how many pods per second a plain client can
create bound to a node and mark Running (the minimum writes of a pod start: the
create, and one status write shaped like a kubelet's), pipelined and observed by
watch. Then it runs a virtual node with the mock provider as a child process,
creates --pods pods on it (at --rate per second, or as fast as --concurrency
allows), and reports throughput, create→Running latency (observed by watch), the
agent's API writes per pod, its memory and CPU, and the same for deleting them
all. Last it measures the ceiling again; the ratio is to the mean of the two.

Without --kubeconfig it starts a local control plane of its own.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary, cfg.Log = bin, cmd.ErrOrStderr()
			var results []*bench.Result
			for i := 0; i < runs; i++ {
				if runs > 1 {
					fmt.Fprintf(cmd.ErrOrStderr(), "bench: run %d of %d\n", i+1, runs)
				}
				r, err := benchOnce(ctx, cmd, cfg, kubeconfig)
				if err != nil {
					return err
				}
				results = append(results, r)
			}
			res := bench.Median(results)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printResult(cmd, res)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 1000, "pods to start and stop (e.g. 1000, 5000, 10000)")
	f.Float64Var(&cfg.Rate, "rate", 0, "offered pod creations per second; 0: as fast as possible")
	f.IntVar(&cfg.Concurrency, "concurrency", 50, "parallel clients creating (and, for the ceiling, writing) pods")
	f.StringVar(&kubeconfig, "kubeconfig", "", "cluster to measure; empty: a local control plane started for the run")
	f.StringSliceVar(&cfg.AgentArgs, "agent-flag", nil, "extra flag for the node agent, repeatable (e.g. --agent-flag=--kube-api-qps=200)")
	f.StringSliceVar(&cfg.AgentEnv, "agent-env", nil, "extra NAME=value environment variable for the node agent, repeatable (e.g. --agent-env=GOGC=50)")
	f.IntVar(&runs, "runs", 1, "repeat the whole measurement this many times (each on a fresh local control plane unless --kubeconfig is given) and report the median of each figure")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printResult(cmd *cobra.Command, r *bench.Result) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	row := func(k, format string, v ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, v...)...) }
	row("pods", "%d", r.Pods)
	if len(r.Runs) > 1 {
		ratios := make([]string, len(r.Runs))
		for i, run := range r.Runs {
			ratios[i] = fmt.Sprintf("%.0f%%", 100*run.RatioToCeiling)
		}
		row("runs", "%d, figures are medians (ratio to ceiling per run: %s)", len(r.Runs), strings.Join(ratios, " "))
	}
	if r.OfferedRate > 0 {
		row("offered rate", "%.0f pods/s", r.OfferedRate)
	}
	row("ceiling (plain client)", "%.1f pods/s (before %.1f, after %.1f)", r.CeilingPodsPerS, r.CeilingBefore, r.CeilingAfter)
	row("node agent", "%.1f pods/s (%.0f%% of ceiling)", r.PodsPerS, 100*r.RatioToCeiling)
	row("create→Running p50/p90/p99", "%.0f / %.0f / %.0f ms", r.P50ms, r.P90ms, r.P99ms)
	row("agent API writes per pod", "%.2f", r.WritesPerPod)
	kinds := make([]string, 0, len(r.WritesByKind))
	for k := range r.WritesByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		row("  "+k, "%.3f", r.WritesByKind[k])
	}
	row("agent RSS idle / peak / growth", "%.1f / %.1f / %.1f MiB", r.IdleRSSMiB, r.PeakRSSMiB, r.RSSGrowthMiB)
	row("agent live heap growth", "%.1f MiB (%.2f KiB per pod)", r.HeapGrowthMiB, 1024*r.HeapGrowthMiB/float64(r.Pods))
	row("agent CPU", "%.1f s", r.CPUSeconds)
	row("delete", "%.1f pods/s, p99 %.0f ms", r.DeletePodsPerS, r.DeleteP99ms)
	w.Flush()
}

// benchOnce runs the benchmark once against kubeconfig or, without one, against a
// local control plane of its own: a fresh one per run, so that every run starts
// from an empty etcd rather than from the history of the runs before it, which
// slows the API server down as it grows.
func benchOnce(ctx context.Context, cmd *cobra.Command, cfg bench.Config, kubeconfig string) (*bench.Result, error) {
	if kubeconfig == "" {
		cp, err := controlplane.Start(ctx, controlplane.Config{Out: cmd.ErrOrStderr()})
		if err != nil {
			return nil, err
		}
		defer cp.Stop()
		kubeconfig = cp.KubeconfigPath
	}
	cfg.Kubeconfig = kubeconfig
	var err error
	if cfg.RESTConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, err
	}
	return bench.Run(ctx, cfg)
}
