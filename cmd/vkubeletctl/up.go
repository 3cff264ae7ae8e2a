package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/lab/clusternet"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/slurmenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
	"github.com/vkubelet/vkubelet/providers/cri"
)

func newUpCommand() *cobra.Command {
	f := nodeflags.Default()
	f.Config.NodeName = "vkubelet"
	// The virtual node is the cluster's only node: a taint would only make every
	// `kubectl run` need a toleration.
	f.Config.DisableTaint = true
	var dir, kubernetesVersion string
	nodes := 1
	var allowPrivileged bool
	netnsMissing := netns.Available()
	useNetns := netnsMissing == nil
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane on 127.0.0.1 and a virtual node in it",
		Long: `up starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
loopback (building them on first use, which takes several minutes) and a virtual
node with the chosen provider. Once the node is Ready it prints one line,
export KUBECONFIG=<path>, and stays in the foreground; Ctrl-C or SIGTERM stops
everything it started. Each run starts a fresh cluster in --dir.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.Apply(cmd.Flags()); err != nil {
				return err
			}
			if f.ConfigFile != "" {
				return fmt.Errorf("up runs its own nodes (--nodes); --config is for vkubelet run")
			}
			if nodes < 1 || nodes > 100 {
				return fmt.Errorf("--nodes %d: want 1 to 100", nodes)
			}
			log, err := f.Logger()
			if err != nil {
				return err
			}
			if dir == "" {
				cache, err := controlplane.CacheDir()
				if err != nil {
					return err
				}
				dir = filepath.Join(cache, "up")
			}
			// A cluster from an earlier run has another PKI; start clean.
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("clearing %s: %w", dir, err)
			}
			ctx := cmd.Context()
			cp, err := controlplane.Start(ctx, controlplane.Config{
				Dir: dir, Scheduler: true, ControllerManager: true, Out: cmd.ErrOrStderr(),
				KubernetesVersion: kubernetesVersion,
			})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(cmd.ErrOrStderr(), "vkubeletctl up: stopping the control plane")
				if err := cp.Stop(); err != nil {
					log.Error("stopping the control plane", "error", err)
				}
			}()
			cfg := f.Config
			var link *netns.Link
			if useNetns {
				// The API server will not proxy nodes/<n>/proxy/... to a loopback
				// address; give the nodes one of their own on this machine, each
				// node a port of it.
				if link, err = netns.Create("vkubelet"); err != nil {
					return fmt.Errorf("--netns: %w", err)
				}
				defer link.Remove()
			}
			var criEnv *crienv.Env
			if cfg.Provider == "cri" && cfg.ProviderConfig == "" {
				// No runtime given: run a private containerd with a local registry
				// that serves busybox, so pods run on a machine without internet.
				// With --netns, containerd and the pods' network live in the
				// node's namespace, where kube-proxy and CoreDNS serve them
				// (started below, once the node is registered).
				env, err := crienv.StartWith(ctx, crienv.Options{Netns: link})
				if err != nil {
					return fmt.Errorf("--provider cri: starting containerd: %w", err)
				}
				defer env.Stop()
				criEnv = env
				criCfg := cri.Config{RuntimeEndpoint: env.Socket, RootDir: filepath.Join(dir, "cri"), AllowPrivileged: allowPrivileged}
				if link != nil {
					criCfg.ClusterDNS, criCfg.ClusterDomain = []string{clusternet.DNSServiceIP}, clusternet.ClusterDomain
				}
				b, err := json.Marshal(criCfg)
				if err != nil {
					return err
				}
				cfg.ProviderConfig = filepath.Join(dir, "cri-provider.json")
				if err := os.WriteFile(cfg.ProviderConfig, b, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "vkubeletctl up: containerd at %s; image busybox served from %s\n", env.Socket, env.Registry)
			}
			if cfg.Provider == "slurm" && cfg.ProviderConfig == "" {
				// No cluster given: run a private Slurm (slurmctld, slurmd, munged)
				// on this machine, and the local registry for busybox.
				reg, err := crienv.StartRegistry()
				if err != nil {
					return fmt.Errorf("--provider slurm: starting the image registry: %w", err)
				}
				defer reg.Stop()
				env, err := slurmenv.Start(ctx, slurmenv.Options{GPUs: 2})
				if err != nil {
					return fmt.Errorf("--provider slurm: starting Slurm: %w", err)
				}
				defer func() { _ = env.Stop() }()
				sc, err := env.ProviderConfig(reg.Registry)
				if err != nil {
					return err
				}
				b, err := json.Marshal(sc)
				if err != nil {
					return err
				}
				cfg.ProviderConfig = filepath.Join(dir, "slurm-provider.json")
				if err := os.WriteFile(cfg.ProviderConfig, b, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "vkubeletctl up: Slurm cluster %s (export SLURM_CONF=%s; %d CPUs, 2 placeholder GPUs); image busybox served from %s\n",
					env.NodeName, env.Conf, env.CPUs, reg.Registry)
			}
			// The node runs as a kubelet does in a real cluster: under its own
			// identity, system:node:<name>, from a TLS bootstrap with a bootstrap
			// token, confined by the Node authorizer and NodeRestriction.
			cfg.Kubeconfig = ""
			if cfg.BootstrapKubeconfig, err = cp.NodeBootstrapKubeconfig(ctx, "", 24*time.Hour); err != nil {
				return err
			}
			// The node asks the cluster for its serving certificate too. Both
			// requests are approved by the approver started below, for these
			// nodes' names and address alone: the bootstrap token can obtain
			// nothing else. The API server verifies the serving certificate
			// against the cluster CA, and the kubelet API trusts the API
			// server's client certificate from the same CA.
			cfg.CertDir = filepath.Join(dir, "node-pki")
			cfg.ClientCAFile = cp.PKI.CACert
			cfg.Logger = log
			if cfg.StartupTimeout == 0 {
				cfg.StartupTimeout = 2 * time.Minute
			}
			configs := make([]agent.Config, nodes)
			for i := range configs {
				configs[i] = cfg
				if nodes > 1 {
					configs[i].NodeName = fmt.Sprintf("%s-%d", cfg.NodeName, i)
					configs[i].CertDir = filepath.Join(cfg.CertDir, configs[i].NodeName)
				}
			}
			if link != nil {
				for i := range configs {
					port := int(cfg.KubeletPort)
					if i > 0 {
						port = 0
					}
					if configs[i].KubeletListener, err = link.Listen(port); err != nil {
						return fmt.Errorf("--netns: %w", err)
					}
					configs[i].InternalIP = link.NodeIP
				}
				// The node does not wait for metrics-server, whose first run
				// builds it (minutes): `kubectl top` comes when it is up. The
				// control plane stops only once the start has ended.
				metricsStarted := make(chan struct{})
				go func() {
					defer close(metricsStarted)
					startMetricsServer(ctx, cmd.ErrOrStderr(), log, cp, link.HostIP)
				}()
				defer func() { <-metricsStarted }()
			} else {
				for i := 1; i < len(configs); i++ {
					configs[i].KubeletPort = 0 // a free port each
				}
				why := "--netns=false"
				if netnsMissing != nil {
					why = netnsMissing.Error()
				}
				log.Warn("the node's address is 127.0.0.1, without a network namespace of its own (" + why + "): logs, exec and port-forward work, but the API server will not proxy nodes/<name>/proxy/... (stats) to it")
				log.Warn("kubectl top is unavailable: metrics-server runs only with --netns, as the API server will not proxy metrics.k8s.io to a loopback address")
			}
			names := make([]string, len(configs))
			for i, c := range configs {
				names[i] = c.NodeName
			}
			nodeIP := "127.0.0.1"
			if link != nil {
				nodeIP = link.NodeIP
			}
			// The nodes' names and their one address: the token obtains nothing else.
			addr, err := identity.ParseCIDRs(nodeIP)
			if err != nil {
				return fmt.Errorf("the node's address %q: %w", nodeIP, err)
			}
			if err := cp.RunNodeApprover(ctx, names, addr, log); err != nil {
				return fmt.Errorf("starting the node CSR approver: %w", err)
			}
			started := time.Now()
			var network *clusternet.Network
			defer func() {
				if network != nil {
					network.Stop()
				}
			}()
			err = runUpNodes(ctx, configs, func() {
				if criEnv != nil && link != nil {
					network = startClusterNetwork(ctx, cmd.ErrOrStderr(), log, cp, link, configs[0].NodeName, criEnv.PodCIDR, dir)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "vkubeletctl up: node %s ready in %s; stop with Ctrl-C\n",
					strings.Join(names, ", "), time.Since(started).Round(time.Millisecond))
				fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", cp.KubeconfigPath)
			})
			if ctx.Err() != nil && err == nil || err == context.Canceled {
				return nil
			}
			return err
		},
	}
	f.Register(cmd.Flags())
	cmd.Flags().BoolVar(&useNetns, "netns", useNetns, "give the node its own address in a network namespace joined to this host by a veth pair (needs root; default: on when root)")
	cmd.Flags().BoolVar(&allowPrivileged, "cri-allow-privileged", false, "with --provider cri and its own containerd: let containers run privileged, as a kubelet does by default (the CRI provider's allowPrivileged; off: such pods are refused)")
	cmd.Flags().IntVar(&nodes, "nodes", nodes, "virtual nodes to start, named <nodename>-0 … when more than one")
	cmd.Flags().StringVar(&kubernetesVersion, "kubernetes-version", controlplane.SelectedKubernetesVersion(),
		"the control plane's Kubernetes release, one of "+strings.Join(controlplane.KubernetesVersions(), ", ")+" (default from $"+controlplane.KubernetesVersionEnv+")")
	cmd.Flags().StringVar(&dir, "dir", "", "state directory of the local cluster (default: <cache>/up, see VKUBELET_CACHE)")
	return cmd
}

// runUpNodes runs every node until ctx ends or one fails, calling ready once all
// are ready.
func runUpNodes(ctx context.Context, configs []agent.Config, ready func()) error {
	g, ctx := errgroup.WithContext(ctx)
	var pending sync.WaitGroup
	pending.Add(len(configs))
	for _, cfg := range configs {
		n, err := agent.New(ctx, cfg)
		if err != nil {
			return err
		}
		var once sync.Once
		g.Go(func() error { return n.Run(ctx, func() { once.Do(pending.Done) }) })
	}
	allReady := make(chan struct{})
	go func() { pending.Wait(); close(allReady) }()
	g.Go(func() error {
		select {
		case <-allReady:
			ready()
		case <-ctx.Done():
		}
		return nil
	})
	return g.Wait()
}

// startClusterNetwork runs kube-proxy and CoreDNS in the node's namespace, which
// give the CRI provider's pods Services and cluster DNS. It runs once the node
// has registered (kube-proxy waits for its address). Pods run without it, so a
// failure is only reported.
func startClusterNetwork(ctx context.Context, out io.Writer, log *slog.Logger, cp *controlplane.ControlPlane, link *netns.Link, node, podCIDR, dir string) *clusternet.Network {
	n, err := clusternet.Start(ctx, clusternet.Config{
		ControlPlane: cp, Link: link, NodeName: node, PodCIDR: podCIDR, Dir: filepath.Join(dir, "clusternet"), Out: out,
	})
	if err != nil {
		log.Error("pods have no Services and no cluster DNS: kube-proxy and CoreDNS did not start", "error", err)
		return nil
	}
	return n
}

// startMetricsServer runs metrics-server for `kubectl top` on the host's end of the
// node's veth pair, which the API server reaches and the node's kubelet API is
// reached from. The node works without it, so a failure is only reported.
func startMetricsServer(ctx context.Context, out io.Writer, log *slog.Logger, cp *controlplane.ControlPlane, address string) {
	started := time.Now()
	if err := cp.StartMetricsServer(ctx, controlplane.MetricsServerConfig{Address: address}); err != nil {
		if ctx.Err() == nil { // not stopped while it was being built
			log.Warn("kubectl top is unavailable: metrics-server did not start", "error", err)
		}
		return
	}
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := cp.WaitMetricsAPI(wctx); err != nil {
			if ctx.Err() == nil {
				log.Warn("kubectl top is unavailable", "error", err)
			}
			return
		}
		fmt.Fprintf(out, "vkubeletctl up: metrics.k8s.io served by metrics-server after %s; kubectl top shows a pod about 30s after it starts\n",
			time.Since(started).Round(time.Millisecond))
	}()
}
