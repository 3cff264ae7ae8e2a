// Package registry is the registry of the providers compiled into vkubelet: it maps
// the --provider name to a constructor. Only the wiring (internal/process/agent) and the CLI
// use it; the controllers know providers through the contract in package provider.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/cri"
	"github.com/vkubelet/vkubelet/providers/interlink"
	"github.com/vkubelet/vkubelet/providers/kube"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// InitConfig is what a provider constructor gets from the command line.
type InitConfig struct {
	NodeName   string
	ConfigPath string // --provider-config; "" for defaults
	InternalIP string // the node's address, for providers that report host IPs
	Logger     *slog.Logger
}

// Constructor builds a provider.
type Constructor func(ctx context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error)

var registry = map[string]Constructor{
	"cri": func(ctx context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		cc, err := cri.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		opts := []cri.Option{cri.WithLogger(cfg.Logger)}
		if cfg.InternalIP != "" {
			opts = append(opts, cri.WithHostIP(cfg.InternalIP))
		}
		return cri.New(ctx, cc, cfg.NodeName, opts...)
	},
	"kube": func(ctx context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		kc, err := kube.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		opts := []kube.Option{kube.WithLogger(cfg.Logger)}
		if cfg.InternalIP != "" {
			opts = append(opts, kube.WithHostIP(cfg.InternalIP))
		}
		return kube.New(ctx, kc, cfg.NodeName, opts...)
	},
	"interlink": func(_ context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		ic, err := interlink.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		return interlink.New(ic, cfg.NodeName, cfg.Logger)
	},
	"slurm": func(_ context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		sc, err := slurm.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		return slurm.New(sc, cfg.NodeName, cfg.Logger)
	},
	"remote": func(ctx context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		rc, err := remote.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		return remote.New(ctx, rc, cfg.NodeName, cfg.Logger)
	},
	"mock": func(_ context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error) {
		mc, err := mock.LoadConfig(cfg.ConfigPath)
		if err != nil {
			return nil, err
		}
		opts := []mock.Option{mock.WithLogger(cfg.Logger)}
		if cfg.InternalIP != "" {
			opts = append(opts, mock.WithHostIP(cfg.InternalIP))
		}
		return mock.New(mc, cfg.NodeName, opts...)
	},
}

// Names lists the registered providers, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the named provider.
func New(ctx context.Context, name string, cfg InitConfig) (provider.PodLifecycleHandler, error) {
	ctor, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (available: %v)", name, Names())
	}
	p, err := ctor(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", name, err)
	}
	return p, nil
}
