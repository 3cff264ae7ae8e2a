package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/fleet"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
)

// runNodeSet runs the nodes of the NodeSet file at path (or, with path empty, the
// one node of the flags, for --leader-elect) until ctx ends. SIGHUP reads the file
// again: added nodes start, removed ones stop, changed ones restart, the others go
// on; a file with an error is not applied and the running nodes stay as they are.
func runNodeSet(ctx context.Context, path string, f *nodeflags.Flags, flags *pflag.FlagSet, log *slog.Logger) error {
	load := func() ([]nodeconfig.Node, error) { return nodeconfig.Load(path) }
	if path == "" {
		load = func() ([]nodeconfig.Node, error) { return []nodeconfig.Node{{Name: f.Config.NodeName}}, nil }
	} else if flags.Changed("nodename") {
		return errors.New("--nodename names one node; the nodes of --config are named in the file")
	}
	nodes, err := load()
	if err != nil {
		return err
	}
	explicit := map[string]bool{}
	for _, name := range []string{fleet.FlagProvider, fleet.FlagProviderConfig, fleet.FlagDisableTaint} {
		// Without a file, the flags are the node's.
		explicit[name] = flags.Changed(name) || path == ""
	}
	fc := fleet.Config{Base: f.Config, Explicit: explicit, Logger: log}
	fc.SingleNode = path == ""
	if f.LeaderElect {
		le := f.Election
		if le.Identity == "" {
			host, _ := os.Hostname()
			le.Identity = fmt.Sprintf("%s_%d", host, os.Getpid())
		}
		if le.Client, err = electionClient(f.Config); err != nil {
			return err
		}
		fc.LeaderElection = &le
	}
	fl, err := fleet.New(fc)
	if err != nil {
		return err
	}
	defer fl.Stop()
	if path != "" && f.Config.MetricsAddr != "" {
		// The nodes' metrics, summed, and the process's profiles.
		shared := fl.Shared()
		if shared == nil {
			return errors.New("--metrics-addr with --config serves the metrics of nodes sharing one client, which nodes with a --bootstrap-kubeconfig do not; scrape each node's /metrics on its kubelet port")
		}
		if err := shared.ServeDebug(ctx, f.Config.MetricsAddr); err != nil {
			return err
		}
	}
	if f.Config.HealthzAddr != "" {
		l, err := net.Listen("tcp", f.Config.HealthzAddr)
		if err != nil {
			return fmt.Errorf("health and readiness endpoint: %w", err)
		}
		srv := &http.Server{Handler: fl.HealthHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	// Signals before the nodes start, so that no SIGHUP is lost.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	started, _ := fl.Apply(ctx, nodes)
	log.Info("nodes started", "config", path, "nodes", len(started))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			nodes, err := load()
			if err != nil {
				log.Error("configuration not applied; the running nodes stay", "error", err)
				continue
			}
			started, stopped := fl.Apply(ctx, nodes)
			log.Info("configuration applied", "config", path, "started", started, "stopped", stopped, "nodes", len(nodes))
		}
	}
}

// electionClient is the client of the nodes' election Leases: the bootstrap
// credential if there is one (a node's own identity may not touch other Leases;
// the chart's ServiceAccount may, in its namespace), else the kubeconfig's, else
// the in-cluster one.
func electionClient(cfg agent.Config) (kubernetes.Interface, error) {
	path := cfg.Kubeconfig
	if cfg.BootstrapKubeconfig != "" {
		path = cfg.BootstrapKubeconfig
	}
	rc := cfg.RESTConfig
	if rc == nil {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return nil, fmt.Errorf("--leader-elect: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		// client-go's default, 5 a second, cannot keep a thousand nodes' Leases:
		// every replica reads each every retry period and renews its own. The
		// process's bound, as for its nodes' client.
		rc.QPS, rc.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	}
	return kubernetes.NewForConfig(rc)
}
