package main

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

	"github.com/vkubelet/vkubelet/internal/fleet"
	"github.com/vkubelet/vkubelet/internal/nodeconfig"
)

// runNodeSet runs the nodes of the NodeSet file at path until ctx ends. SIGHUP
// reads the file again: added nodes start, removed ones stop, changed ones
// restart, the others go on; a file with an error is not applied and the running
// nodes stay as they are.
func runNodeSet(ctx context.Context, path string, f *nodeFlags, flags *pflag.FlagSet, log *slog.Logger) error {
	nodes, err := nodeconfig.Load(path)
	if err != nil {
		return err
	}
	if flags.Changed("nodename") {
		return errors.New("--nodename names one node; the nodes of --config are named in the file")
	}
	if f.cfg.MetricsAddr != "" {
		return errors.New("--metrics-addr serves one node; with --config scrape each node's /metrics on its kubelet port")
	}
	explicit := map[string]bool{}
	for _, name := range []string{fleet.FlagProvider, fleet.FlagProviderConfig, fleet.FlagDisableTaint} {
		explicit[name] = flags.Changed(name)
	}
	fl := fleet.New(fleet.Config{Base: f.cfg, Explicit: explicit, Logger: log})
	defer fl.Stop()
	if f.cfg.HealthzAddr != "" {
		l, err := net.Listen("tcp", f.cfg.HealthzAddr)
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
			nodes, err := nodeconfig.Load(path)
			if err != nil {
				log.Error("configuration not applied; the running nodes stay", "error", err)
				continue
			}
			started, stopped := fl.Apply(ctx, nodes)
			log.Info("configuration applied", "config", path, "started", started, "stopped", stopped, "nodes", len(nodes))
		}
	}
}
