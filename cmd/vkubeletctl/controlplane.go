package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

func newControlPlaneCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Manage the local control plane's binaries",
	}
	var all bool
	version := controlplane.SelectedKubernetesVersion()
	build := &cobra.Command{
		Use:   "build",
		Short: "Build (or find in the cache) the control plane's binaries, etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kube-proxy, and print their paths; with --all also metrics-server, kwok, helm and CoreDNS",
		Long: `build builds the control plane's binaries from the Go module proxy, or finds
them in the cache, and prints their paths: what ` + "`vkubeletctl up`" + ` runs. The tools the
other commands and the tests use are built when they are first needed; --all
builds them too: metrics-server (` + "`up`" + ` with --netns), kwok (` + "`bench --compare kwok`" + `),
helm (the chart's tests) and CoreDNS (with kube-proxy, the cluster networking of
CRI pods).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, log := cmd.Context(), cmd.ErrOrStderr()
			b, err := controlplane.EnsureKubernetes(ctx, version, log)
			if err != nil {
				return err
			}
			paths := []string{b.Etcd, b.APIServer, b.Scheduler, b.ControllerManager, b.Kubectl, b.KubeProxy}
			if all {
				ms, err := controlplane.EnsureMetricsServer(ctx, log)
				if err != nil {
					return err
				}
				kwok, err := controlplane.EnsureKwok(ctx, log)
				if err != nil {
					return err
				}
				helm, err := controlplane.EnsureHelm(ctx, log)
				if err != nil {
					return err
				}
				coredns, err := controlplane.EnsureCoreDNS(ctx, log)
				if err != nil {
					return err
				}
				paths = append(paths, ms, kwok.Binary, helm, coredns)
			}
			for _, p := range paths {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	}
	build.Flags().BoolVar(&all, "all", false, "also build metrics-server, kwok, helm and CoreDNS")
	build.Flags().StringVar(&version, "kubernetes-version", version,
		"the Kubernetes release, one of "+strings.Join(controlplane.KubernetesVersions(), ", ")+" (default from $"+controlplane.KubernetesVersionEnv+")")
	cmd.AddCommand(build)
	return cmd
}
