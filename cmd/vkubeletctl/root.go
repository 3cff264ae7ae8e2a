package main

import (
	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/version"
)

func newRootCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vkubeletctl",
		Short: "Try and measure vkubelet on a local control plane",
		Long: `vkubeletctl starts a local Kubernetes control plane with virtual nodes in it
(up), measures a node's pod throughput, latency and cost (bench), runs a node
for a long time under pod churn (soak), and builds or
finds the control plane's binaries (controlplane build). The node alone is the
vkubelet command.`,
		SilenceUsage:  true,
		SilenceErrors: true, // main prints them, once
	}
	cmd.AddCommand(newUpCommand(), newBenchCommand(), newControlPlaneCommand(), newConformanceCommand(), newSoakCommand(), newSkewCommand(), version.Command("vkubeletctl"))
	return cmd
}
