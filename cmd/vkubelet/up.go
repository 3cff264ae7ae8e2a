package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/agent"
	"github.com/vkubelet/vkubelet/internal/controlplane"
)

func newUpCommand() *cobra.Command {
	f := defaultNodeFlags()
	f.cfg.NodeName = "vkubelet"
	// The virtual node is the cluster's only node: a taint would only make every
	// `kubectl run` need a toleration.
	f.cfg.DisableTaint = true
	var dir string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane on 127.0.0.1 and a virtual node in it",
		Long: `up starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
loopback (building them on first use, which takes several minutes) and a virtual
node with the chosen provider. Once the node is Ready it prints one line,
export KUBECONFIG=<path>, and stays in the foreground; Ctrl-C or SIGTERM stops
everything it started. Each run starts a fresh cluster in --dir.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := f.logger()
			if err != nil {
				return err
			}
			if dir == "" {
				cache, err := controlplane.CacheDir()
				if err != nil {
					return err
				}
				dir = filepath.Join(cache, "up")
			}
			// A cluster from an earlier run has another PKI; start clean.
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("clearing %s: %w", dir, err)
			}
			ctx := cmd.Context()
			cp, err := controlplane.Start(ctx, controlplane.Config{
				Dir: dir, Scheduler: true, ControllerManager: true, Out: cmd.ErrOrStderr(),
			})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(cmd.ErrOrStderr(), "vkubelet up: stopping the control plane")
				if err := cp.Stop(); err != nil {
					log.Error("stopping the control plane", "error", err)
				}
			}()
			cfg := f.cfg
			cfg.Kubeconfig = cp.KubeconfigPath
			cfg.Logger = log
			if cfg.StartupTimeout == 0 {
				cfg.StartupTimeout = 2 * time.Minute
			}
			n, err := agent.New(ctx, cfg)
			if err != nil {
				return err
			}
			started := time.Now()
			err = n.Run(ctx, func() {
				fmt.Fprintf(cmd.ErrOrStderr(), "vkubelet up: node %s ready in %s; stop with Ctrl-C\n",
					cfg.NodeName, time.Since(started).Round(time.Millisecond))
				fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", cp.KubeconfigPath)
			})
			if ctx.Err() != nil && err == nil || err == context.Canceled {
				return nil
			}
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&dir, "dir", "", "state directory of the local cluster (default: <cache>/up, see VKUBELET_CACHE)")
	return cmd
}
