package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

func newControlPlaneCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Manage the local control plane's binaries",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "build",
		Short: "Build (or find in the cache) etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, kube-proxy, metrics-server, kwok (for bench --compare kwok), helm (for the chart's tests) and CoreDNS (with kube-proxy, the cluster networking of CRI pods), and print their paths",
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
			coredns, err := controlplane.EnsureCoreDNS(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			for _, p := range []string{b.Etcd, b.APIServer, b.Scheduler, b.ControllerManager, b.Kubectl, b.KubeProxy, ms, kwok.Binary, helm, coredns} {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	})
	return cmd
}
