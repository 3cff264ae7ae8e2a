// Package nodeflags holds the command-line flags of a node process: the node's
// configuration (agent.Config), NodeSet and leader-election flags, logging, and
// upstream virtual-kubelet's flags under their old names. `vkubelet` (and
// `vkubelet run`) and `vkubeletctl up` both register them, so a node started by
// either takes the same flags with the same defaults. It parses and checks; it
// runs nothing.
package nodeflags

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/fleet"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/process/tracing"
)

// Flags are the flags of a node process.
// Names and meanings follow upstream virtual-kubelet where they are the same.
type Flags struct {
	// Config is the node's configuration, as the flags set it.
	Config agent.Config
	// ConfigFile is a NodeSet file (--config): several nodes in one process.
	ConfigFile string
	// LeaderElect shares the nodes between replicas (--leader-elect).
	LeaderElect bool
	Election    fleet.LeaderElection
	LogLevel    string
	LogFormat   string
	upstream    upstreamFlags
}

// Default is the flags before parsing: the defaults, some taken from the
// environment as upstream virtual-kubelet takes them.
func Default() *Flags {
	hostname, _ := os.Hostname()
	port := int32(10250)
	if v := os.Getenv("KUBELET_PORT"); v != "" {
		if p, err := strconv.ParseInt(v, 10, 32); err == nil {
			port = int32(p)
		}
	}
	ip := os.Getenv("VKUBELET_POD_IP")
	if ip == "" {
		ip = "127.0.0.1"
	}
	return &Flags{
		Config: agent.Config{
			NodeName:        envOr("DEFAULT_NODE_NAME", strings.ToLower(hostname)),
			Provider:        "mock",
			Providers:       registry.Builtin(),
			Kubeconfig:      os.Getenv("KUBECONFIG"),
			OperatingSystem: "linux",
			InternalIP:      ip,
			KubeletPort:     port,
			// A sync or status write mostly waits for the API server (a pod's
			// TokenRequest, its status patch): at 50 workers a node with 10,000
			// token pods reached 71 % of the bench's ceiling, at 200 96 %
			// (vkubeletctl bench). Workers are goroutines that live while the
			// queue has items (pod/workqueue.go), so an idle node pays nothing
			// for the bound.
			PodSyncWorkers:     200,
			PodStatusWorkers:   200,
			FullResyncPeriod:   time.Minute,
			StatusPollInterval: 5 * time.Second,
			StartupTimeout:     0,
			ClusterDomain:      "cluster.local",
			KubeAPIQPS:         1000,
			KubeAPIBurst:       2000,
			KubeAPIContentType: runtime.ContentTypeProtobuf,
			ServingCertFile:    os.Getenv("APISERVER_CERT_LOCATION"),
			ServingKeyFile:     os.Getenv("APISERVER_KEY_LOCATION"),
			LeaseDuration:      40 * time.Second,
			RenewInterval:      10 * time.Second,
			Tracing:            tracing.Config{SamplingRatio: -1},
		},
		Election: fleet.LeaderElection{Namespace: "default", LeaseDuration: 40 * time.Second,
			RenewDeadline: 30 * time.Second, RetryPeriod: 4 * time.Second},
		LogLevel:  "info",
		LogFormat: "text",
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Register defines the flags on fs, upstream virtual-kubelet's included.
// --provider's help lists f.Config.Providers: set them first.
func (f *Flags) Register(fs *pflag.FlagSet) {
	c := &f.Config
	fs.StringVar(&f.ConfigFile, "config", f.ConfigFile, "a NodeSet file (apiVersion vkubelet.io/v1alpha1) naming several nodes to run in this process, each with its provider, provider config, labels, taints and capacity; flags given on the command line win over the file's fields; SIGHUP applies a changed file")
	fs.BoolVar(&f.LeaderElect, "leader-elect", f.LeaderElect, "share the nodes with other replicas of the same configuration: each node runs in the one replica holding its Lease <leader-elect-namespace>/vkubelet-<node>, and moves to another within the lease duration when that replica dies")
	fs.StringVar(&f.Election.Namespace, "leader-elect-namespace", f.Election.Namespace, "namespace of the nodes' election Leases")
	fs.DurationVar(&f.Election.LeaseDuration, "leader-elect-lease-duration", f.Election.LeaseDuration, "how long a replica's hold on a node lasts without renewal: the longest a dead replica's nodes wait")
	fs.DurationVar(&f.Election.RenewDeadline, "leader-elect-renew-deadline", f.Election.RenewDeadline, "a holder that cannot renew within this time gives its nodes up")
	fs.DurationVar(&f.Election.RetryPeriod, "leader-elect-retry-period", f.Election.RetryPeriod, "how often replicas try to take a node")
	fs.IntVar(&f.Election.Replicas, "leader-elect-replicas", f.Election.Replicas, "with --leader-elect, spread the nodes over up to this many replicas: each replica holding one of the Leases <leader-elect-namespace>/<leader-elect-group>-replica-0… runs about its share of the nodes, taking them from the others as it joins and handing them back as it leaves; a replica beyond this many stands by. 0: the first replica runs every node")
	fs.StringVar(&f.Election.Group, "leader-elect-group", "vkubelet", "with --leader-elect-replicas, the name of the replicas sharing this configuration, in their membership Leases' names: one per configuration sharing a namespace")
	fs.StringVar(&c.NodeName, "nodename", c.NodeName, "name of the virtual node ($DEFAULT_NODE_NAME, else the host name)")
	fs.StringVar(&c.Provider, "provider", c.Provider, "provider that runs the pods: "+strings.Join(c.Providers.Names(), ", "))
	fs.StringVar(&c.ProviderConfig, "provider-config", c.ProviderConfig, "provider configuration file")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig of the cluster to join ($KUBECONFIG; empty: in-cluster config); with --bootstrap-kubeconfig, used if it exists, else written after the TLS bootstrap")
	fs.StringVar(&c.BootstrapKubeconfig, "bootstrap-kubeconfig", c.BootstrapKubeconfig, "as the kubelet's: authenticate as system:node:<nodename> with a client certificate kept in --cert-dir, asked for with this kubeconfig's credential (a bootstrap token) and renewed before it expires")
	fs.StringVar(&c.OperatingSystem, "os", c.OperatingSystem, "operating system reported by the node (kubernetes.io/os)")
	fs.StringVar(&c.InternalIP, "address", c.InternalIP, "InternalIP address of the node, where the API server reaches the kubelet API ($VKUBELET_POD_IP)")
	fs.Int32Var(&c.KubeletPort, "kubelet-port", c.KubeletPort, "port of the kubelet API ($KUBELET_PORT)")
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "IP address the kubelet API listens on (0.0.0.0 or :: for every address); empty: the --address the node advertises")
	fs.IntVar(&c.PodSyncWorkers, "pod-sync-workers", c.PodSyncWorkers, "workers creating, updating and deleting pods in the provider")
	fs.IntVar(&c.PodStatusWorkers, "pod-status-workers", c.PodStatusWorkers, "workers writing pod statuses to the API server (each waits on one request)")
	fs.StringVar(&c.PodWatch, "pod-watch", "auto", "what a node with a credential of its own watches: node (its own pods, as the kubelet; the API server closes such a watch during bursts of pods), bound (lists its own pods, watches every bound pod's changes and keeps its own; needs list and watch of pods), auto (node for a node identity, else bound while allowed)")
	fs.DurationVar(&c.FullResyncPeriod, "full-resync-period", c.FullResyncPeriod, "how often every pod is synced again; 0 disables")
	fs.DurationVar(&c.StatusPollInterval, "status-poll-interval", c.StatusPollInterval, "how often pod statuses are read from a provider that does not push them")
	fs.DurationVar(&c.RemoveUnconfirmedAfter, "remove-unconfirmed-after", c.RemoveUnconfirmedAfter, "remove a deleted pod from the API this long after its grace period although the provider has not confirmed that it stopped; 0 (the default) keeps it Terminating until the provider does, as the kubelet keeps a pod until its containers stopped, so that a StatefulSet never runs two copies of a pod. A bound gives that up for pods the provider is slow or fails to stop")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", c.StartupTimeout, "fail if the node is not ready within this time; 0 waits forever")
	fs.BoolVar(&c.DisableTaint, "disable-taint", c.DisableTaint, "do not taint the node with virtual-kubelet.io/provider=<provider>:NoSchedule")
	fs.StringVar(&c.ClusterDomain, "cluster-domain", c.ClusterDomain, "cluster DNS domain, for providers that configure pod DNS")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "loopback address serving the agent's /metrics and /debug/pprof without authentication (e.g. 127.0.0.1:10255); empty disables. Elsewhere, scrape /metrics on the kubelet port (nodes/metrics)")
	fs.StringVar(&c.HealthzAddr, "healthz-addr", c.HealthzAddr, "address serving /healthz and /readyz alone, without authentication, for probes (e.g. :10248); empty disables")
	fs.Float32Var(&c.KubeAPIQPS, "kube-api-qps", c.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "burst of queries to the API server")
	fs.StringVar(&c.KubeAPIContentType, "kube-api-content-type", c.KubeAPIContentType, "encoding of requests to the API server (application/vnd.kubernetes.protobuf or application/json)")
	fs.DurationVar(&c.LeaseDuration, "node-lease-duration", c.LeaseDuration, "duration of the node's Lease")
	fs.DurationVar(&c.RenewInterval, "node-lease-renew-interval", c.RenewInterval, "how often the node's Lease is renewed")
	fs.StringVar(&c.ServingCertFile, "tls-cert-file", c.ServingCertFile, "serving certificate of the kubelet API ($APISERVER_CERT_LOCATION); empty: request one from the cluster (CSR)")
	fs.StringVar(&c.ServingKeyFile, "tls-private-key-file", c.ServingKeyFile, "key of --tls-cert-file ($APISERVER_KEY_LOCATION)")
	fs.BoolVar(&c.SelfSignedServingCert, "self-signed-serving-cert", c.SelfSignedServingCert, "serve the kubelet API with a self-signed certificate instead of asking the cluster (the API server cannot verify it)")
	fs.BoolVar(&c.ApproveServingCSR, "approve-serving-csr", c.ApproveServingCSR, "approve the node's own kubelet-serving CSR, with the --bootstrap-kubeconfig credential if given (a node may not approve), else the node's (needs the right to approve kubelet-serving CSRs)")
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir, "where the node's client certificate (--bootstrap-kubeconfig) and the cluster-issued serving certificate are kept (default: a directory under the system temp dir)")
	fs.StringVar(&c.ClientCAFile, "client-ca-file", c.ClientCAFile, "CA that signs client certificates accepted by the kubelet API; empty: the cluster's, from kube-system/extension-apiserver-authentication")
	fs.StringVar(&c.Tracing.Endpoint, "tracing-endpoint", c.Tracing.Endpoint, "host:port of an OTLP/gRPC receiver for traces of pod syncs, provider calls and status writes; empty: $OTEL_EXPORTER_OTLP_ENDPOINT, and off without it")
	fs.BoolVar(&c.Tracing.Insecure, "tracing-insecure", c.Tracing.Insecure, "send traces over plaintext gRPC (a collector on the same host)")
	fs.Float64Var(&c.Tracing.SamplingRatio, "tracing-sampling-ratio", c.Tracing.SamplingRatio, "fraction of pod traces recorded, 0 to 1; negative: $OTEL_TRACES_SAMPLER decides (default: all)")
	fs.StringVar(&f.LogLevel, "log-level", f.LogLevel, "log level: trace, debug, info, warn, error (upstream virtual-kubelet's warning, fatal and panic too)")
	fs.StringVar(&f.LogFormat, "log-format", f.LogFormat, "log format: text (key=value) or json (one object a line)")
	f.upstream.register(fs, f)
}

// Logger builds the process's structured logger and makes it the default, for
// vkubelet's own logs and for client-go's and the other Kubernetes libraries',
// which log through klog: klog is routed into the same handler, so a node's log is
// one stream in one format.
func (f *Flags) Logger() (*slog.Logger, error) {
	l, err := NewLogger(os.Stderr, f.LogLevel, f.LogFormat)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(l)
	klog.SetSlogLogger(l)
	return l, nil
}

// NewLogger is a logger writing to w at level in format ("text" or "json").
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// parseLevel reads --log-level: slog's levels (debug, info, warn, error, also
// with an offset such as debug-4), and upstream virtual-kubelet's (logrus's)
// names with their meaning: trace is more than debug, warning is warn, fatal
// and panic log errors only, since vkubelet logs nothing above error.
func parseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "trace":
		return slog.LevelDebug - 4, nil
	case "warning":
		return slog.LevelWarn, nil
	case "fatal", "panic":
		return slog.LevelError, nil
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want trace, debug, info, warn (warning), error, fatal or panic", level)
	}
	return lv, nil
}

// Apply checks the upstream virtual-kubelet flags given on fs (the flag set
// Register defined) and carries their meaning into f, or says why they cannot be
// given. Call it once the flags are parsed.
func (f *Flags) Apply(fs *pflag.FlagSet) error {
	if f.Election.Replicas != 0 && !f.LeaderElect {
		return fmt.Errorf("--leader-elect-replicas spreads the nodes of --leader-elect; give both")
	}
	if f.Election.Replicas < 0 {
		return fmt.Errorf("--leader-elect-replicas %d: want 0 (no spreading) or more", f.Election.Replicas)
	}
	return f.upstream.apply(fs, f)
}
