// Package sdk builds a vkubelet of your own: a program whose main names Go
// providers and runs vkubelet's node command with them, so that a provider kept
// in another repository is compiled into the node instead of running beside it
// over the provider protocol (docs/PROVIDERS.md).
//
// The command is vkubelet's, with every flag and subcommand: run one node or,
// with --config, the nodes of a NodeSet file, shared among replicas with
// --leader-elect; the node identity, kubelet API, tracing and metrics flags;
// providers; provider serve (any of the program's providers, served over the
// protocol); provider conformance; approve-csrs; version. --provider, and a
// NodeSet's provider field, names one of the program's providers or one of
// vkubelet's built-in ones (mock, remote, cri, kube, …), which the node links
// in any case.
//
// A provider implements provider.PodLifecycleHandler and whichever optional
// interfaces of package provider it can; the node finds those by type
// assertion. The package is the command's entry and nothing else: it starts
// nothing until Main or the command runs, and like cmd/vkubelet it links no lab
// code.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/process/nodecmd"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/version"
	"github.com/vkubelet/vkubelet/provider"
)

// ProviderConfig is what a provider is built with, for one node: each node of a
// NodeSet gets a provider of its own.
type ProviderConfig struct {
	// NodeName is the node the provider runs pods for (--nodename, or the name
	// in a NodeSet file).
	NodeName string
	// ConfigPath is the provider's configuration file (--provider-config, or a
	// NodeSet node's providerConfig); "" asks for its defaults. Its format is
	// the provider's own.
	ConfigPath string
	// InternalIP is the node's address (--address), for a provider that reports
	// it as its pods' hostIP; "" under provider serve, which runs no node.
	InternalIP string
	// Client is the node's own API client, for a provider that reads the API,
	// such as an upstream virtual-kubelet provider whose ProviderConfig
	// listers package upstream serves (upstream.Config.Client). It is the
	// node's credential: under a node identity (--bootstrap-kubeconfig, or a
	// system:node:<name> certificate) the Node authorizer limits it to what the
	// node may read: its pods, the ConfigMaps and Secrets they reference,
	// Services, its own Node. In a NodeSet whose nodes share one
	// credential it is that shared client, with that credential's rights. nil
	// under provider serve, which runs no node. A provider still reports pods
	// and statuses to the node, which writes them: the client is for reading.
	Client kubernetes.Interface
	// Logger is the process's logger (--log-level, --log-format), for the
	// provider to log through.
	Logger *slog.Logger
}

// Provider is a provider the program carries: --provider Name selects it, and
// New builds it for each node that names it.
//
// The context New is given ends when the node stops: the provider may start
// goroutines that live on it. A provider that holds more (connections, files)
// may have a Close() error or Close() method, which the node calls once it has
// stopped. The provider's pods go on running; a node started again finds them
// with GetPods.
type Provider struct {
	// Name is what --provider says. It is also the value of the node's taint
	// virtual-kubelet.io/provider=<Name>:NoSchedule, so it must be a valid label
	// value (letters, digits, '-', '_', '.', at most 63), and it may not be one
	// of the built-in providers' names.
	Name string
	New  func(ctx context.Context, cfg ProviderConfig) (provider.PodLifecycleHandler, error)
}

// Command is vkubelet's node command with providers beside the built-in ones,
// for a program that adds commands of its own or runs it itself (with
// ExecuteContext). It fails if a provider has no name or constructor, or a
// name that is taken.
func Command(providers ...Provider) (*cobra.Command, error) {
	reg, err := registryOf(providers)
	if err != nil {
		return nil, err
	}
	if info, ok := debug.ReadBuildInfo(); ok && version.Version == "dev" {
		// Unless the build set it (-ldflags -X), the version the node reports
		// (vkubelet version, the Node's kubeletVersion) is the one of vkubelet's
		// module the program was built with.
		if v := moduleVersion(info); v != "" {
			version.Version = v
		}
	}
	return nodecmd.New(reg), nil
}

// moduleVersion is the version of vkubelet's module in a program's build info:
// "" for a program built against a checkout (a replace directive) or in
// vkubelet's own module.
func moduleVersion(info *debug.BuildInfo) string {
	for _, m := range info.Deps {
		if m.Path == modulePath && m.Replace == nil {
			return m.Version
		}
	}
	return ""
}

// modulePath is vkubelet's module.
const modulePath = "github.com/vkubelet/vkubelet"

// Main runs vkubelet's node command with providers beside the built-in ones, on
// the process's arguments, until the command ends or the process gets SIGINT
// or SIGTERM; it then exits, non-zero with the error on stderr if the command
// failed. It is the whole of a program's main.
func Main(providers ...Provider) {
	cmd, err := Command(providers...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vkubelet:", err)
		os.Exit(1)
	}
	nodecmd.Main(cmd)
}

// registryOf is the built-in providers and providers.
func registryOf(providers []Provider) (*registry.Registry, error) {
	reg := registry.Builtin()
	builtin := reg.Names()
	for _, p := range providers {
		if p.Name == "" {
			return nil, errors.New("a provider without a name")
		}
		if errs := validation.IsValidLabelValue(p.Name); len(errs) > 0 {
			return nil, fmt.Errorf("provider %q: the name is the value of the node's taint, and %s", p.Name, strings.Join(errs, "; "))
		}
		if slices.Contains(builtin, p.Name) {
			return nil, fmt.Errorf("provider %q: a built-in provider has that name; give yours another", p.Name)
		}
		if p.New == nil {
			return nil, fmt.Errorf("provider %q: New is nil", p.Name)
		}
		build := p.New
		ctor := func(ctx context.Context, cfg registry.InitConfig) (provider.PodLifecycleHandler, error) {
			// The two types have the same fields: ProviderConfig is the
			// registry's InitConfig as its users see it, so a field added to
			// one must be added to the other, or this stops compiling.
			return build(ctx, ProviderConfig(cfg))
		}
		if err := reg.Add(p.Name, ctor); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
