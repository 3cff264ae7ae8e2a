// Package registry maps the --provider name to a provider's constructor: the
// providers compiled into vkubelet (Builtin), and those a program built with
// package sdk adds beside them. Only the wiring (internal/process/agent) and the
// CLI use it; the controllers know providers through the contract in package
// provider.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/cri"
	"github.com/vkubelet/vkubelet/providers/interlink"
	"github.com/vkubelet/vkubelet/providers/kube"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// InitConfig is what a provider constructor gets from the command line and
// the node.
type InitConfig struct {
	NodeName   string
	ConfigPath string // --provider-config; "" for defaults
	InternalIP string // the node's address, for providers that report host IPs
	// Client is the node's API client, for a provider that reads the API (an
	// upstream provider's listers): under a node identity the Node authorizer
	// limits it to what the node may read; the NodeSet's shared client for
	// nodes that share one credential; nil where no node runs (provider
	// serve). The built-in providers do not use it.
	Client kubernetes.Interface
	Logger *slog.Logger
}

// Constructor builds a provider.
type Constructor func(ctx context.Context, cfg InitConfig) (provider.PodLifecycleHandler, error)

// Registry is a set of providers by name. Its zero value has none; Builtin has
// vkubelet's own. It is filled before the node starts and only read after, so
// it needs no lock.
type Registry struct {
	ctors map[string]Constructor
}

// Builtin is a registry of the providers compiled into vkubelet, a new one at
// each call, so that adding to it changes no one else's.
func Builtin() *Registry {
	return &Registry{ctors: maps.Clone(builtin)}
}

// Add registers ctor under name. A name already taken is an error: a NodeSet
// file or a command line naming it would otherwise mean two things.
func (r *Registry) Add(name string, ctor Constructor) error {
	if ctor == nil {
		return fmt.Errorf("provider %q: no constructor", name)
	}
	if _, ok := r.ctors[name]; ok {
		return fmt.Errorf("provider %q is registered already", name)
	}
	if r.ctors == nil {
		r.ctors = map[string]Constructor{}
	}
	r.ctors[name] = ctor
	return nil
}

var builtin = map[string]Constructor{
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
func (r *Registry) Names() []string {
	return slices.Sorted(maps.Keys(r.ctors))
}

// New builds the named provider.
func (r *Registry) New(ctx context.Context, name string, cfg InitConfig) (provider.PodLifecycleHandler, error) {
	ctor, ok := r.ctors[name]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (available: %v)", name, r.Names())
	}
	p, err := ctor(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", name, err)
	}
	return p, nil
}
