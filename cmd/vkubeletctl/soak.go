package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/soak"
)

func newSoakCommand() *cobra.Command {
	var (
		cfg        soak.Config
		vkubelet   string
		asJSON     bool
		kubeconfig string
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run a node for a long time under pod churn and check that its memory, goroutines, descriptors and records stay flat",
		Long: `soak starts a local control plane (scheduler and controller-manager included;
or uses --kubeconfig's cluster) and a virtual node with the mock provider as a child process (the vkubelet
command: --vkubelet, by default the one next to vkubeletctl), runs a Deployment
of --pods pods on it, and for --duration churns them: it deletes pods (their
ReplicaSet creates replacements), changes pods' labels, runs exec sessions and
follows logs through the API server, each at its rate, on Running pods picked at
random. Every --sample-every it samples the node process: its live heap (after a
forced collection), RSS, goroutines, file descriptors and sockets, and the pods
its provider reports (/metrics/resource through the API server).

After --warm-up (while the node's bounded caches fill: client-go's event
correlator keeps 4,096 entries in each of its three, keyed by pod) it fits a line to each figure and reports its growth over the
rest of the run. A figure is flat when it grew by at most 5 % of its mean (2 %
for the provider's pods) or a small floor (1 MiB of heap, 2 MiB of RSS, 10
goroutines, 5 descriptors or sockets, 5 pods). soak exits with status 1 when a
figure is not flat or when any operation failed for another reason than its
pod being deleted meanwhile: either is a bug to find.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = nodeBinary(vkubelet); err != nil {
				return err
			}
			ctx := cmd.Context()
			cfg.Log = cmd.ErrOrStderr()
			if kubeconfig == "" {
				cp, err := controlplane.Start(ctx, controlplane.Config{Scheduler: true, ControllerManager: true, Out: cmd.ErrOrStderr()})
				if err != nil {
					return err
				}
				defer cp.Stop()
				kubeconfig = cp.KubeconfigPath
			}
			cfg.Kubeconfig = kubeconfig
			if cfg.RESTConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
				return err
			}
			r, err := soak.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else if err := printSoak(cmd.OutOrStdout(), r); err != nil {
				return err
			}
			return soakVerdict(cmd.ErrOrStderr(), r)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 1000, "pods the node runs throughout (a Deployment's replicas)")
	f.DurationVar(&cfg.Duration, "duration", 40*time.Minute, "how long the churn lasts")
	f.DurationVar(&cfg.WarmUp, "warm-up", 0, "how much of the churn's start is left out of the fitted lines, while the node's bounded caches fill (default 15m)")
	f.DurationVar(&cfg.SampleEvery, "sample-every", 30*time.Second, "time between samples of the node")
	f.Float64Var(&cfg.DeletesPerS, "deletes", 5, "pods deleted per second (their ReplicaSet replaces them)")
	f.Float64Var(&cfg.UpdatesPerS, "updates", 2, "pods whose labels are changed per second")
	f.Float64Var(&cfg.ExecsPerS, "execs", 1, "exec sessions per second")
	f.Float64Var(&cfg.LogsPerS, "logs", 1, "log streams followed per second")
	f.DurationVar(&cfg.LogFollow, "log-follow", 10*time.Second, "how long each followed log stream stays open")
	f.StringVar(&cfg.HeapProfiles, "heap-profiles", "", "directory where the node's heap profiles are saved: warm.heap after the warm-up, end.heap at the last sample (go tool pprof -base warm.heap end.heap)")
	f.StringVar(&vkubelet, "vkubelet", "", "the vkubelet executable run as the node (default: vkubelet next to vkubeletctl)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "cluster to soak the node in, with an admin's credential, a scheduler and a controller-manager; empty: a local control plane started for the run")
	f.BoolVar(&asJSON, "json", false, "print the result, every sample included, as JSON")
	return cmd
}

// printSoak prints the operations, the trends and every fifth sample.
func printSoak(out io.Writer, r *soak.Result) error {
	fmt.Fprintf(out, "%d pods Running after %.0f s; %.0f s of churn (%d pods created), the first %.0f s left out of the lines; node CPU %.1f %% of a core; every pod Running again %.0f s after the churn\n\n",
		r.Pods, r.StartSeconds, r.DurationSeconds, r.Created, r.WarmUpSeconds, r.CPUPercent, r.RecoveredSeconds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "operation\tok\tpod deleted meanwhile\tfailed")
	for _, k := range []string{"delete", "update", "exec", "logs"} {
		o := r.Ops[k]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", k, o.OK, o.Raced, o.Failed)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "figure\tat the warm-up's end\tat the end\tgrowth\tper hour\tallowed\tflat")
	for _, name := range soak.Figures() {
		t := r.Trends[name]
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%+.1f\t%+.1f\t%.1f\t%v\n", name, t.First, t.Last, t.Growth, t.PerHour, t.Allowed, t.Flat)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "s\theap MiB\tRSS MiB\tgoroutines\tfds\tsockets\tprovider pods\tAPI pods\tqueued")
	for i, s := range r.Samples {
		if i%5 == 0 || i == len(r.Samples)-1 {
			fmt.Fprintf(w, "%.0f\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n", s.Seconds, s.HeapMiB, s.RSSMiB, s.Goroutines, s.FDs, s.Sockets, s.ProviderPods, s.APIPods, s.QueuedPods)
		}
	}
	return w.Flush()
}

// soakVerdict is the command's error: a figure that grew, or an operation that
// failed.
func soakVerdict(log io.Writer, r *soak.Result) error {
	var problems []string
	for _, name := range soak.Figures() {
		if t := r.Trends[name]; !t.Flat {
			problems = append(problems, fmt.Sprintf("%s grew by %.1f (%+.1f per hour), more than the %.1f allowed", name, t.Growth, t.PerHour, t.Allowed))
		}
	}
	for k, o := range r.Ops {
		if o.Failed > 0 {
			problems = append(problems, fmt.Sprintf("%d %s operations failed: %v", o.Failed, k, o.Errors))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	for _, p := range problems {
		fmt.Fprintln(log, "soak:", p)
	}
	return fmt.Errorf("soak: %d problems", len(problems))
}
