// Package nodecmd is vkubelet's node command line (cobra): run a node, or the
// nodes of a NodeSet with leader election; providers; provider serve and
// provider conformance; approve-csrs; remove-node; version. Its flags are nodeflags'. It is
// built around a provider registry: cmd/vkubelet runs it with the built-in
// providers, package sdk with a program's own beside them, so the image's
// binary and a provider author's go one code path. It is not the lab's command
// (cmd/vkubeletctl) and links no lab code.
package nodecmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/version"
)

// Main runs cmd with the process's arguments until it ends or the process gets
// SIGINT or SIGTERM, and exits non-zero, with the error on stderr, if it failed.
// It is a program's main.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vkubelet:", err)
		os.Exit(1)
	}
}

// New is the vkubelet command, whose --provider names one of providers.
func New(providers *registry.Registry) *cobra.Command {
	f := newFlags(providers)
	cmd := &cobra.Command{
		Use:   "vkubelet",
		Short: "Run a virtual node: the Kubernetes API on top, a provider behind",
		Long: `vkubelet registers a virtual node in a Kubernetes cluster and hands every pod the
scheduler binds to it to a provider. It stops on SIGINT or SIGTERM, leaving the
provider's pods running; started again, it picks them up. With --config it runs
the several nodes a NodeSet file names (docs/NODESETS.md).`,
		// Main prints the error, once.
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          runNode(f),
	}
	f.Register(cmd.Flags())
	cmd.AddCommand(newRunCommand(providers), version.Command("vkubelet"), newProvidersCommand(providers),
		newProviderCommand(providers), newApproverCommand(), newRemoveNodeCommand())
	for _, name := range []string{"up", "bench", "controlplane"} {
		cmd.AddCommand(newMovedCommand(name))
	}
	return cmd
}

// newRunCommand is `vkubelet run`: the same as vkubelet alone, named for the
// NodeSet case (vkubelet run --config nodes.yaml).
func newRunCommand(providers *registry.Registry) *cobra.Command {
	f := newFlags(providers)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a virtual node, or with --config the nodes of a NodeSet file (the same as vkubelet alone)",
		// Main prints the error, once.
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          runNode(f),
	}
	f.Register(cmd.Flags())
	return cmd
}

// newFlags is the node flags' defaults, with the providers --provider may name.
func newFlags(providers *registry.Registry) *nodeflags.Flags {
	f := nodeflags.Default()
	f.Config.Providers = providers
	return f
}

// runNode runs the node of the flags, or the nodes of --config.
func runNode(f *nodeflags.Flags) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := f.Apply(cmd.Flags()); err != nil {
			return err
		}
		if err := agent.CheckPodWatch(f.Config.PodWatch); err != nil {
			return err
		}
		log, err := f.Logger()
		if err != nil {
			return err
		}
		f.Config.Logger = log
		if f.ConfigFile != "" || f.LeaderElect {
			return runNodeSet(cmd.Context(), f.ConfigFile, f, cmd.Flags(), log)
		}
		n, err := agent.New(cmd.Context(), f.Config)
		if err != nil {
			return err
		}
		return n.Run(cmd.Context(), nil)
	}
}

// newMovedCommand is a hidden command standing for one of vkubeletctl's, the lab's
// commands, which the node's binary does not carry: it says where the command is
// and fails.
func newMovedCommand(name string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Hidden:             true,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true, // main prints it, once
		RunE: func(_ *cobra.Command, args []string) error {
			return fmt.Errorf("%s is in vkubeletctl, the lab's command (the node's binary carries only the node): run vkubeletctl %s",
				name, strings.Join(append([]string{name}, args...), " "))
		},
	}
}

func newProvidersCommand(providers *registry.Registry) *cobra.Command {
	return &cobra.Command{
		Use:   "providers",
		Short: "List the providers compiled in",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			for _, n := range providers.Names() {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
		},
	}
}
