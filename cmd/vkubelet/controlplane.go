package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/controlplane"
)

func newControlPlaneCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Manage the local control plane's binaries",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "build",
		Short: "Build (or find in the cache) etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, metrics-server, kwok (for bench --compare kwok) and helm (for the chart's tests), and print their paths",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := controlplane.EnsureBinaries(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ms, err := controlplane.EnsureMetricsServer(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			kwok, err := controlplane.EnsureKwok(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			helm, err := controlplane.EnsureHelm(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			for _, p := range []string{b.Etcd, b.APIServer, b.Scheduler, b.ControllerManager, b.Kubectl, ms, kwok.Binary, helm} {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	})
	return cmd
}
