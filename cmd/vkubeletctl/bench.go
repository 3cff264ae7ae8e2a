package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/lab/bench"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/upstreammock"
)

func newBenchCommand() *cobra.Command {
	var (
		cfg          bench.Config
		compare      bench.Comparison
		asJSON       bool
		kubeconfig   string
		runs         int
		providerName string
		vkubelet     string
		upstream     bool
		replicas     int
	)
	cfg.Shape = bench.ShapeDeployment
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pod start/stop throughput, latency and cost of a node, next to the API server's ceiling (and kwok)",
		Long: `bench first measures the ceiling: how many pods per second a plain client can
create bound to a node and mark Running doing the minimum a node must (the create;
a TokenRequest bound to the pod for each service-account token it mounts, as the
kubelet makes; one status write shaped like a kubelet's), pipelined and observed
by watch, and how many it can delete (the graceful delete, then the node's final
one). Then it runs a virtual node with the mock provider as a child process
(the vkubelet command: --vkubelet, by default the one next to vkubeletctl),
creates --pods pods on it (at --rate per second, or as fast as --concurrency
allows), and reports throughput, create→Running latency (observed by watch), the
agent's API writes per pod, its memory and CPU, and the same for deleting them
all. Last it measures the ceiling again; ratios are to the mean of the two.

The pods are, by default, shaped as those of a Deployment made with kubectl
create deployment (--pod-shape=deployment): the namespace's default
ServiceAccount with the projected kube-api-access token volume that the
ServiceAccount admission plugin adds, an owner reference to a ReplicaSet (a real
one, of 0 replicas), the labels app and pod-template-hash, requests of 10m CPU
and 16Mi, three environment variables. --pod-shape=minimal is the old token-less
one-container pod.

With --upstream, upstream virtual-kubelet's own mock provider, its source
unchanged, is measured on vkubelet's engine (a vkubelet with the mock compiled
in through the adapter, package upstream, built from the checkout bench runs
in, next to the agent with vkubelet's mock, in alternating order run by run)
and on upstream's engine (upstream's virtual-kubelet command, built once into
the cache; with --upstream-engine-pods pods, as it is paced at 5 requests a
second).

With --compare kwok, kwok (built once into the cache, like the control-plane
binaries) manages a second node of the same cluster and is measured the same way,
before the agent; its API writes are the API server's count less the benchmark's
own. The figures are printed side by side.

Without --kubeconfig it starts a local control plane of its own (no
controller-manager, the ServiceAccount admission plugin on; the benchmark creates
each namespace's default ServiceAccount and kube-root-ca.crt itself). A cluster
given with --kubeconfig needs that plugin for the default shape, and no
controller-manager: its ReplicaSet controller would delete the pods (the
benchmark stops when it sees that; --pod-shape=minimal works there).`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			bin, err := nodeBinary(vkubelet)
			if err != nil {
				return err
			}
			cfg.Binary, cfg.Log = bin, cmd.ErrOrStderr()
			if replicas > 1 {
				if providerName != "mock" || compare != "" || upstream || cfg.Remote {
					return errors.New("--replicas measures vkubelet's mock nodes alone: no --provider, --compare, --upstream or --remote")
				}
				return benchReplicas(cmd, cfg, kubeconfig, replicas, asJSON)
			}
			if cfg.Nodes > 1 && providerName != "mock" {
				return fmt.Errorf("--nodes %d: several nodes are measured with the mock provider only", cfg.Nodes)
			}
			switch providerName {
			case "mock":
			case "slurm":
				return benchSlurm(cmd, cfg, kubeconfig, runs, asJSON)
			case "cri":
				return benchCRI(cmd, cfg, kubeconfig, runs, asJSON)
			default:
				return fmt.Errorf("--provider %s: the benchmark measures mock (default), slurm or cri", providerName)
			}
			if compare == bench.CompareKwok {
				kwok, err := controlplane.EnsureKwok(ctx, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				cfg.KwokBinary, cfg.KwokStages = kwok.Binary, kwok.Stages
			}
			if upstream {
				cleanup, err := upstreamBinaries(cmd, &cfg)
				if err != nil {
					return err
				}
				defer cleanup()
			}
			var results []*bench.Result
			for i := 0; i < runs; i++ {
				if runs > 1 {
					fmt.Fprintf(cmd.ErrOrStderr(), "bench: run %d of %d\n", i+1, runs)
				}
				cfg.UpstreamFirst = i%2 == 1
				cfg.RemoteFirst = i%2 == 1
				r, err := onControlPlane(ctx, cmd, cfg, kubeconfig, bench.Run)
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
			printResult(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 1000, "pods to start and stop (e.g. 1000, 5000, 10000)")
	f.IntVar(&replicas, "replicas", 1, "with more than one, run that many vkubelet processes at once, each with the same NodeSet of --nodes mock nodes spread over them (--leader-elect-replicas), and report, once every Node is Ready and for --node-idle, each one's share of the nodes, CPU and memory; no pods")
	f.IntVar(&cfg.Nodes, "nodes", 1, "nodes each implementation runs in its one process (vkubelet: a NodeSet file, as vkubelet run --config; kwok: nodes by label); pods are bound to them in turn, and the idle nodes' heap and writes per node are reported")
	f.DurationVar(&cfg.NodeIdle, "node-idle", 0, "how long the idle nodes are watched before any pod is created (default 30s with --nodes above 1)")
	f.Float64Var(&cfg.Rate, "rate", 0, "offered pod creations per second; 0: as fast as possible")
	f.IntVar(&cfg.Concurrency, "concurrency", 50, "parallel clients creating (and, for the ceiling, writing) pods")
	f.Var(&cfg.Shape, "pod-shape", "the pods created: deployment (a Deployment's pod, service-account token volume and owner reference included) or minimal (one container, no token)")
	f.Var(&compare, "compare", "also measure another node implementation on a second node, in the same run: kwok")
	f.StringVar(&kubeconfig, "kubeconfig", "", "cluster to measure; empty: a local control plane started for the run")
	f.StringSliceVar(&cfg.AgentArgs, "agent-flag", nil, "extra flag for the node agent, repeatable (e.g. --agent-flag=--kube-api-qps=200)")
	f.StringSliceVar(&cfg.AgentEnv, "agent-env", nil, "extra NAME=value environment variable for the node agent, repeatable (e.g. --agent-env=GOGC=50)")
	f.StringVar(&cfg.HeapProfiles, "heap-profiles", "", "directory to save the heap profiles behind the live heap figures in (KIND-idle.heap, KIND-pods.heap; the last run's), for go tool pprof")
	f.BoolVar(&cfg.Remote, "remote", false, "also measure the node with the mock behind the provider protocol (vkubelet provider serve on a unix socket; the provider process's CPU is reported next to the agent's, its memory is not counted), in the same run")
	f.DurationVar(&cfg.Idle, "idle", 0, "let each node's pods run untouched this long once Running and report its API writes per second meanwhile (leases, token refreshes; these start 9 minutes into one-hour tokens, so e.g. --idle 15m)")
	f.IntVar(&runs, "runs", 1, "repeat the whole measurement this many times (each on a fresh local control plane unless --kubeconfig is given) and report the median of each figure")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&upstream, "upstream", false, "also measure upstream virtual-kubelet's mock provider on vkubelet's engine (through the adapter) and on upstream's own, in the same run; run from a vkubelet checkout")
	f.IntVar(&cfg.UpstreamEnginePods, "upstream-engine-pods", 0, "pods for upstream's engine with --upstream (default: --pods, at most 1000)")
	f.StringVar(&vkubelet, "vkubelet", "", "the vkubelet executable run as the node agent (default: vkubelet next to vkubeletctl)")
	f.StringVar(&providerName, "provider", "mock", "mock, or slurm: a private Slurm started for the run, the same jobs submitted by sbatch and run as pods through a node with --provider slurm (pods of --pod-shape running sleep; --concurrency submitters, default 50); or cri: a private containerd started for the run, the same pods run through the CRI directly (as crictl runp, create, start) and through a node with --provider cri")
	return cmd
}

// nodeBinary is the vkubelet executable that bench and soak run as the node: path
// (a file, or a name looked up in $PATH), else vkubelet next to this executable,
// as `make build` puts them. It is absolute, as the agent runs in a directory of
// its own.
func nodeBinary(path string) (string, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding vkubelet next to vkubeletctl: %w; give --vkubelet PATH", err)
		}
		path = filepath.Join(filepath.Dir(self), "vkubelet")
	}
	found, err := exec.LookPath(path)
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) && strings.ContainsRune(path, filepath.Separator) {
			err = ee.Err // stat <path>: no such file or directory, say
		}
		return "", fmt.Errorf("vkubeletctl runs the node from the vkubelet command: %w; build it next to vkubeletctl (make build) or give --vkubelet PATH", err)
	}
	return filepath.Abs(found)
}

// upstreamBinaries builds the two programs `bench --upstream` measures:
// upstream's mock through vkubelet's adapter, from the checkout the working
// directory is in, and upstream's own command, cached.
func upstreamBinaries(cmd *cobra.Command, cfg *bench.Config) (cleanup func(), err error) {
	ctx := cmd.Context()
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	repo, err := upstreammock.Checkout(ctx, wd)
	if err != nil {
		return nil, fmt.Errorf("--upstream builds upstream's mock with vkubelet's adapter from a checkout: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "bench: building upstream's mock with vkubelet's adapter from %s\n", repo)
	if cfg.UpstreamNode, err = upstreammock.Build(ctx, repo, upstreammock.Node, false); err != nil {
		return nil, err
	}
	cleanup = func() { os.RemoveAll(filepath.Dir(cfg.UpstreamNode)) }
	if cfg.UpstreamEngine, err = controlplane.EnsureUpstreamVirtualKubelet(ctx, cmd.ErrOrStderr()); err != nil {
		cleanup()
		return nil, err
	}
	if cfg.UpstreamEnginePods == 0 {
		cfg.UpstreamEnginePods = min(cfg.Pods, 1000)
	}
	return cleanup, nil
}

// benchSlurm runs `bench --provider slurm`: on a fresh control plane per run (or
// --kubeconfig), the median of --runs runs of the raw sbatch path next to the node.
func benchSlurm(cmd *cobra.Command, cfg bench.Config, kubeconfig string, runs int, asJSON bool) error {
	return benchNextToRaw(cmd, cfg, kubeconfig, runs, asJSON, bench.RunSlurm,
		func(r *bench.SlurmResult) string {
			return fmt.Sprintf("sbatch %.1f pods/s, vkubelet %.1f pods/s (%+.0f%% time)", r.Sbatch.PodsPerS, r.Vkubelet.PodsPerS, 100*r.Overhead)
		},
		bench.MedianSlurm, printSlurmResult)
}

// printSlurmResult prints the medians of the sbatch path and the node side by side.
func printSlurmResult(out io.Writer, res *bench.SlurmResult, runs []*bench.SlurmResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "pods\t%d on a private Slurm, runs %d (medians)\n\n", res.Pods, len(runs))
	fmt.Fprintln(w, "\tsbatch (the same job scripts)\tvkubelet --provider slurm")
	fmt.Fprintf(w, "pods/s to Running\t%.1f\t%.1f\n", res.Sbatch.PodsPerS, res.Vkubelet.PodsPerS)
	fmt.Fprintf(w, "time for all\t%.1f s\t%.1f s (%+.0f%%)\n", res.Sbatch.Seconds, res.Vkubelet.Seconds, 100*res.Overhead)
	fmt.Fprintf(w, "p50 / p99\t%.0f / %.0f ms\t%.0f / %.0f ms\n", res.Sbatch.P50ms, res.Sbatch.P99ms, res.Vkubelet.P50ms, res.Vkubelet.P99ms)
	_ = w.Flush()
}

// benchCRI runs `bench --provider cri`: on a fresh control plane and a fresh
// containerd per run (or --kubeconfig), the median of --runs runs of the raw CRI
// path next to the node.
func benchCRI(cmd *cobra.Command, cfg bench.Config, kubeconfig string, runs int, asJSON bool) error {
	return benchNextToRaw(cmd, cfg, kubeconfig, runs, asJSON, bench.RunCRI,
		func(r *bench.CRIResult) string {
			return fmt.Sprintf("raw CRI %.1f pods/s, vkubelet %.1f pods/s (%+.0f%% time)", r.Raw.PodsPerS, r.Vkubelet.PodsPerS, 100*r.Overhead)
		},
		bench.MedianCRI, printCRIResult)
}

// benchNextToRaw runs a benchmark of a provider next to its back end driven
// directly (sbatch, the CRI) runs times, each on a control plane of its own,
// reports each run on stderr, and writes the median: as JSON, or with print.
func benchNextToRaw[R any](cmd *cobra.Command, cfg bench.Config, kubeconfig string, runs int, asJSON bool,
	run func(context.Context, bench.Config) (R, error), describe func(R) string,
	median func([]R) R, print func(io.Writer, R, []R)) error {
	var results []R
	for i := 0; i < runs; i++ {
		r, err := onControlPlane(cmd.Context(), cmd, cfg, kubeconfig, run)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: run %d of %d: %s\n", i+1, runs, describe(r))
		results = append(results, r)
	}
	res := median(results)
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	print(cmd.OutOrStdout(), res, results)
	return nil
}

// printCRIResult prints the medians of the raw CRI path and the node side by
// side, then each run's.
func printCRIResult(out io.Writer, res *bench.CRIResult, runs []*bench.CRIResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "pods\t%d on a private containerd, runs %d (medians)\n\n", res.Pods, len(runs))
	fmt.Fprintln(w, "\traw CRI (runp, create, start)\tvkubelet --provider cri")
	fmt.Fprintf(w, "pods/s to Running\t%.1f\t%.1f\n", res.Raw.PodsPerS, res.Vkubelet.PodsPerS)
	fmt.Fprintf(w, "time for all\t%.2f s\t%.2f s (%+.0f%%)\n", res.Raw.Seconds, res.Vkubelet.Seconds, 100*res.Overhead)
	fmt.Fprintf(w, "p50 / p99\t%.0f / %.0f ms\t%.0f / %.0f ms (%+.0f%% / %+.0f%%)\n", res.Raw.P50ms, res.Raw.P99ms,
		res.Vkubelet.P50ms, res.Vkubelet.P99ms, 100*res.P50Overhead, 100*res.P99Overhead)
	fmt.Fprintf(w, "agent CPU while starting\t—\t%.2f s\n", res.AgentCPUSeconds)
	w.Flush()
	if len(runs) < 2 {
		return
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "run\tload\traw pods/s\traw p50 / p99 ms\tvkubelet pods/s\tvkubelet p50 / p99 ms\ttime / p50 / p99 over raw")
	for i, r := range runs {
		fmt.Fprintf(w, "%d\t%.2f\t%.1f\t%.0f / %.0f\t%.1f\t%.0f / %.0f\t%+.0f%% / %+.0f%% / %+.0f%%\n", i+1, r.LoadAverage,
			r.Raw.PodsPerS, r.Raw.P50ms, r.Raw.P99ms, r.Vkubelet.PodsPerS, r.Vkubelet.P50ms, r.Vkubelet.P99ms,
			100*r.Overhead, 100*r.P50Overhead, 100*r.P99Overhead)
	}
	w.Flush()
}

// printResult prints the figures as a table: the ceiling, kwok if measured, and
// the agent side by side, then each node's writes by kind.
func printResult(out io.Writer, r *bench.Result) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	shape := string(r.PodShape)
	if r.PodShape == bench.ShapeDeployment {
		shape += " (service-account token volume, owner reference)"
	}
	fmt.Fprintf(w, "pods\t%d, shape %s\n", r.Pods, shape)
	if len(r.Runs) > 1 {
		ratios := make([]string, len(r.Runs))
		for i, run := range r.Runs {
			ratios[i] = fmt.Sprintf("%.0f%%", 100*run.RatioToCeiling)
			if run.Kwok != nil {
				ratios[i] += fmt.Sprintf(" (kwok %.0f%%)", 100*run.Kwok.RatioToCeiling)
			}
		}
		fmt.Fprintf(w, "runs\t%d, figures are medians (vkubelet's ratio to the ceiling per run: %s)\n", len(r.Runs), strings.Join(ratios, ", "))
	}
	if r.OfferedRate > 0 {
		fmt.Fprintf(w, "offered rate\t%.0f pods/s\n", r.OfferedRate)
	}
	fmt.Fprintln(w)

	type column struct {
		name string
		n    *bench.NodeResult
	}
	nodes := []column{{"vkubelet", &r.NodeResult}}
	if r.Kwok != nil {
		nodes = []column{{"kwok", r.Kwok}, nodes[0]}
	}
	if r.Remote != nil {
		nodes = append(nodes, column{"vkubelet, mock over the protocol", r.Remote})
	}
	if r.UpstreamMock != nil {
		nodes = append(nodes, column{"upstream's mock on vkubelet", r.UpstreamMock})
	}
	if r.UpstreamEngine != nil {
		nodes = append(nodes, column{fmt.Sprintf("upstream's mock on upstream's engine (%d pods)", r.UpstreamEnginePods), r.UpstreamEngine})
	}
	row := func(what, ceiling string, cell func(n *bench.NodeResult) string) {
		fmt.Fprintf(w, "%s\t%s", what, ceiling)
		for _, c := range nodes {
			fmt.Fprintf(w, "\t%s", cell(c.n))
		}
		fmt.Fprintln(w)
	}
	const none = "—"
	header := "\tceiling (plain client)"
	for _, c := range nodes {
		header += "\t" + c.name
	}
	fmt.Fprintln(w, header)
	row("pods/s to Running", fmt.Sprintf("%.1f (before %.1f, after %.1f)", r.CeilingPodsPerS, r.CeilingBefore, r.CeilingAfter),
		func(n *bench.NodeResult) string {
			return fmt.Sprintf("%.1f (%.0f%% of ceiling)", n.PodsPerS, 100*n.RatioToCeiling)
		})
	row("create→Running p50 / p90 / p99", none,
		func(n *bench.NodeResult) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f ms", n.P50ms, n.P90ms, n.P99ms)
		})
	row("API writes per pod start", fmt.Sprintf("%.2f", r.CeilingWritesPerPod),
		func(n *bench.NodeResult) string { return fmt.Sprintf("%.2f", n.WritesPerPod) })
	row("RSS idle / peak / growth", none,
		func(n *bench.NodeResult) string {
			return fmt.Sprintf("%.1f / %.1f / %.1f MiB", n.IdleRSSMiB, n.PeakRSSMiB, n.RSSGrowthMiB)
		})
	row("RSS anonymous / file-backed, idle → pods", none,
		func(n *bench.NodeResult) string {
			return fmt.Sprintf("%.1f / %.1f → %.1f / %.1f MiB", n.IdleAnonMiB, n.IdleFileMiB, n.AnonMiB, n.FileMiB)
		})
	row("live heap growth", none,
		func(n *bench.NodeResult) string {
			if n.NoHeap {
				return none
			}
			return fmt.Sprintf("%.1f MiB (%.2f KiB per pod)", n.HeapGrowthMiB, 1024*n.HeapGrowthMiB/float64(r.Pods))
		})
	row("CPU", none, func(n *bench.NodeResult) string {
		if n == r.Remote {
			return fmt.Sprintf("%.1f s + provider process %.1f s", n.CPUSeconds, n.ProviderCPUSeconds)
		}
		return fmt.Sprintf("%.1f s", n.CPUSeconds)
	})
	if r.IdleMaxMinuteWritesPerS > 0 || len(r.IdleWritesPerS) > 0 {
		row("idle API writes/s: mean / busiest minute", none,
			func(n *bench.NodeResult) string {
				total := 0.0
				for _, v := range n.IdleWritesPerS {
					total += v
				}
				return fmt.Sprintf("%.2f / %.2f", total, n.IdleMaxMinuteWritesPerS)
			})
	}
	if r.Nodes > 1 {
		row(fmt.Sprintf("%d idle nodes: live heap per node", r.Nodes), none,
			func(n *bench.NodeResult) string { return fmt.Sprintf("%.1f KiB", n.IdleHeapKiBPerNode) })
		row("idle writes per node: Lease per 10 s / Node per min / other per min", none,
			func(n *bench.NodeResult) string {
				return fmt.Sprintf("%.2f / %.2f / %.2f", n.IdleLeaseWritesPer10sNode, n.IdleNodeWritesPerMinNode, n.IdleOtherWritesPerMinNode)
			})
	}
	row("delete pods/s", fmt.Sprintf("%.1f", r.CeilingDeletePodsPerS),
		func(n *bench.NodeResult) string {
			return fmt.Sprintf("%.1f (p99 %.0f ms)", n.DeletePodsPerS, n.DeleteP99ms)
		})
	w.Flush()

	for _, c := range nodes {
		fmt.Fprintf(out, "\n%s writes per pod start (counted by %s): %s", c.name, c.n.WritesCountedBy, byKind(c.n.WritesByKind, "%.3f"))
		if c.n.PodWatches != nil {
			fmt.Fprintf(out, "\n%s pod watches opened during the starts: %.0f", c.name, *c.n.PodWatches)
		}
		if len(c.n.DeleteWritesByKind) > 0 {
			fmt.Fprintf(out, "\n%s writes per pod delete (counted by %s): %s", c.name, c.n.WritesCountedBy, byKind(c.n.DeleteWritesByKind, "%.3f"))
		}
		if len(c.n.IdleWritesPerS) > 0 {
			fmt.Fprintf(out, "\n%s idle writes/s: %s", c.name, byKind(c.n.IdleWritesPerS, "%.3f"))
		}
	}
	fmt.Fprintln(out)
}

// byKind lists a figure per kind of write, sorted by kind: "PATCH pods/status
// 1.000, POST leases 0.001".
func byKind(m map[string]float64, format string) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s "+format, k, m[k])
	}
	return strings.Join(kinds, ", ")
}

// onControlPlane runs one run of a benchmark against kubeconfig or, without one,
// against a local control plane of its own, stopped after the run: a fresh one per
// run, so that every run starts from an empty etcd rather than from the history of
// the runs before it, which slows the API server down as it grows. It runs no
// controller-manager (which would compete for the same cores) but keeps the
// ServiceAccount admission plugin on, so pods get their token volume as in a real
// cluster.
func onControlPlane[R any](ctx context.Context, cmd *cobra.Command, cfg bench.Config, kubeconfig string, run func(context.Context, bench.Config) (R, error)) (R, error) {
	var none R
	if kubeconfig == "" {
		cp, err := controlplane.Start(ctx, controlplane.Config{ServiceAccountAdmission: true, Out: cmd.ErrOrStderr()})
		if err != nil {
			return none, err
		}
		defer cp.Stop()
		kubeconfig = cp.KubeconfigPath
	}
	cfg.Kubeconfig = kubeconfig
	var err error
	if cfg.RESTConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return none, err
	}
	return run(ctx, cfg)
}

// benchReplicas runs bench.RunReplicas and prints each replica's share and cost.
func benchReplicas(cmd *cobra.Command, cfg bench.Config, kubeconfig string, replicas int, asJSON bool) error {
	r, err := onControlPlane(cmd.Context(), cmd, cfg, kubeconfig, func(ctx context.Context, cfg bench.Config) (*bench.ReplicasResult, error) {
		return bench.RunReplicas(ctx, cfg, replicas)
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "%d nodes over %d replicas: spread after %.1f s, every Node Ready after %.1f s; then idle for %.0f s:\n\n",
		r.Nodes, r.Replicas, r.SpreadSeconds, r.ReadySeconds, r.WindowSeconds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "replica\tpid\tnodes\tCPU (% of a core)\tRSS MiB\tpeak RSS MiB\tCPU s until spread")
	for i, e := range r.Each {
		fmt.Fprintf(w, "%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\n", i, e.Pid, e.Nodes, e.CPUPercent, e.RSSMiB, e.PeakMiB, e.CPUSecondsToSpread)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	verbs := make([]string, 0, len(r.LeaseRequestsPerS))
	for v := range r.LeaseRequestsPerS {
		verbs = append(verbs, v)
	}
	sort.Strings(verbs)
	fmt.Fprintf(out, "\nthe API server's requests on Leases (election and node Leases), per second:")
	for _, v := range verbs {
		fmt.Fprintf(out, " %s %.1f", v, r.LeaseRequestsPerS[v])
	}
	fmt.Fprintln(out)
	return nil
}
