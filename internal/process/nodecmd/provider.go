package nodecmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/remote/conformance"
)

func newProviderCommand(providers *registry.Registry) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Run a provider as a process of its own, behind the provider protocol",
	}
	var (
		name, config, node, listen, logLevel string
		certFile, keyFile, clientCA          string
		pprofAddr                            string
	)
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve an in-process provider (mock, cri, kube, …) over vkubelet's provider protocol, for a node run with --provider remote",
		Long: `serve runs one provider and serves it over vkubelet's provider protocol (gRPC,
docs/PROVIDERS.md) on a unix socket or a TCP port, for a node agent started with
--provider remote. The provider keeps running while the node agent restarts, and
the other way round; a node whose provider is away goes NotReady and loses
nothing. It stops on SIGINT or SIGTERM.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := nodeflags.NewLogger(cmd.ErrOrStderr(), logLevel, "text")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// No Client: serve runs no node and has no credential of one; the
			// node the provider is served to keeps its own.
			p, err := providers.New(ctx, name, registry.InitConfig{NodeName: node, ConfigPath: config, Logger: log})
			if err != nil {
				return err
			}
			l, creds, err := providerListener(listen, certFile, keyFile, clientCA)
			if err != nil {
				return err
			}
			if pprofAddr != "" {
				if err := serveProfiles(ctx, pprofAddr, log); err != nil {
					l.Close()
					return err
				}
			}
			log.Info("serving the provider", "provider", name, "node", node, "listen", listen, "tls", creds != nil)
			srv := remote.NewServer(ctx, p, name, log)
			return srv.Serve(ctx, l, remote.ServeOptions{TLS: creds})
		},
	}
	f := serve.Flags()
	f.StringVar(&name, "provider", "mock", "the provider to serve: "+strings.Join(providers.Names(), ", "))
	f.StringVar(&config, "provider-config", "", "its configuration file")
	f.StringVar(&node, "nodename", "vkubelet", "the node the provider runs pods for")
	f.StringVar(&listen, "listen", "", "unix:///path/to.sock, or host:port (TCP; give --tls-cert-file unless on loopback)")
	f.StringVar(&certFile, "tls-cert-file", "", "serving certificate for TCP")
	f.StringVar(&keyFile, "tls-private-key-file", "", "its key")
	f.StringVar(&clientCA, "client-ca-file", "", "require client certificates signed by this CA (mutual TLS)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&pprofAddr, "pprof-addr", "", "serve the process's profiles (/debug/pprof/) on this loopback host:port, unauthenticated; empty: none")
	cmd.AddCommand(serve, newConformanceCommand())
	return cmd
}

func newConformanceCommand() *cobra.Command {
	var (
		cfg  conformance.Config
		tlsc remote.TLSConfig
	)
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the provider conformance suite against a provider protocol endpoint",
		Long: `conformance checks, through the provider protocol, what a node agent relies on
from a provider: capabilities; NOT_FOUND for an unknown pod; a pod created runs,
is listed with its UID, is not run twice when created again, survives an update;
its status comes by WatchPods (if claimed); logs, exec and stats, and an
ephemeral container added by an update (each if claimed); a
new connection finds it (restart reconcile); deleted, it stops within its grace
period. It runs one pod, in namespace vkubelet-conformance, and removes it.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tlsc != (remote.TLSConfig{}) {
				cfg.Remote.TLS = &tlsc
			}
			cfg.Remote.Timeout.Duration = 30 * time.Second
			cfg.Log = cmd.OutOrStdout()
			results, err := conformance.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return conformance.Failed(results)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Remote.Endpoint, "endpoint", "", "unix:///path/to.sock or host:port of the provider")
	f.StringVar(&tlsc.CAFile, "tls-ca-file", "", "CA of the provider's certificate (TCP)")
	f.StringVar(&tlsc.CertFile, "tls-cert-file", "", "client certificate, for mutual TLS")
	f.StringVar(&tlsc.KeyFile, "tls-key-file", "", "its key")
	f.StringVar(&tlsc.ServerName, "tls-server-name", "", "the name the provider's certificate must carry")
	f.StringVar(&cfg.NodeName, "nodename", "vkubelet", "the node the provider serves")
	f.StringVar(&cfg.Image, "image", "busybox", "image of the test pod")
	f.StringSliceVar(&cfg.Command, "command", nil, "command of the test pod (one that keeps running, for providers of real containers)")
	f.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "how long each wait for the provider may take")
	return cmd
}

// serveProfiles serves the process's profiles on addr, a loopback address (they
// are served to whoever connects), until ctx ends: for measuring the provider
// apart from the node agent, which serves its own on --metrics-addr.
func serveProfiles(ctx context.Context, addr string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--pprof-addr %q is not a loopback address: profiles are served without authentication", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("serving profiles", "addr", addr, "error", err)
		}
	}()
	return nil
}

// providerListener opens the serve address: a unix socket only the user may use,
// or a TCP port, with TLS from the files given. Plain TCP is for loopback only.
func providerListener(listen, certFile, keyFile, clientCA string) (net.Listener, credentials.TransportCredentials, error) {
	if listen == "" {
		return nil, nil, errors.New("--listen is required")
	}
	if path, ok := strings.CutPrefix(listen, "unix://"); ok {
		_ = os.Remove(path) // a socket left by an earlier run
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, nil, err
		}
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return nil, nil, err
		}
		return l, nil, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen %q: want unix:///path or host:port", listen)
	}
	var creds credentials.TransportCredentials
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, err
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		if clientCA != "" {
			pem, err := os.ReadFile(clientCA)
			if err != nil {
				return nil, nil, err
			}
			tc.ClientCAs = x509.NewCertPool()
			if !tc.ClientCAs.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("no certificate in %s", clientCA)
			}
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		creds = credentials.NewTLS(tc)
	} else if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, nil, fmt.Errorf("--listen %s: plain TCP only on loopback; give --tls-cert-file and --tls-private-key-file", listen)
	}
	l, err := net.Listen("tcp", listen)
	return l, creds, err
}
