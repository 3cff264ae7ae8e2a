package agent

import (
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/internal/process/tracing"
)

// Config is everything a node process is configured with; the CLI fills it from flags.
type Config struct {
	NodeName string
	// Provider names the node's provider in Providers; ProviderConfig is the
	// path of its configuration file, "" for its defaults.
	Provider       string
	ProviderConfig string
	// Providers are the providers Provider may name; nil: the built-in ones
	// (registry.Builtin).
	Providers *registry.Registry
	// Kubeconfig is the path of the kubeconfig; "" uses in-cluster config.
	Kubeconfig string
	// RESTConfig, when set, is used instead of Kubeconfig (in-process callers).
	RESTConfig *rest.Config
	// BootstrapKubeconfig, as the kubelet's --bootstrap-kubeconfig: unless
	// Kubeconfig names an existing file, the node authenticates as itself
	// (system:node:<name>) with a client certificate kept in CertDir, asked for
	// with this kubeconfig's credential when there is none (TLS bootstrap) and
	// renewed before it expires; Kubeconfig, if given, is then written to use it.
	// BootstrapRESTConfig is the same for in-process callers.
	BootstrapKubeconfig string
	BootstrapRESTConfig *rest.Config
	// ServingCSRApprover, if set, approves the node's own serving CSR
	// (ApproveServingCSR) in place of the node's credential, which a node identity
	// may not use for approving.
	ServingCSRApprover *rest.Config

	OperatingSystem string
	InternalIP      string
	KubeletPort     int32
	DisableTaint    bool
	PodSyncWorkers  int
	// PodStatusWorkers write pod statuses; 0 takes the pod controller's default.
	PodStatusWorkers int
	// PodWatch is what a node with a client of its own watches (--pod-watch):
	// "node", "bound", or "auto" ("" too): "node" for a node identity, "bound"
	// while the API server allows it for other credentials (podWatchScope).
	PodWatch         string
	FullResyncPeriod time.Duration
	// StatusPollInterval is how often a provider without a notifier is polled.
	StatusPollInterval time.Duration
	// RemoveUnconfirmedAfter is pod.Config.RemoveUnconfirmedAfter
	// (--remove-unconfirmed-after): 0 keeps a deleted pod until the provider
	// confirms it stopped.
	RemoveUnconfirmedAfter time.Duration
	StartupTimeout         time.Duration
	ClusterDomain          string
	// MetricsAddr is a loopback address serving the agent's metrics and profiles
	// without authentication, for local debugging and vkubeletctl bench; "" disables
	// it. Elsewhere /metrics is scraped on the kubelet port, authorized as
	// nodes/metrics.
	MetricsAddr string
	// HealthzAddr serves /healthz and /readyz alone, without authentication, on
	// any address: for liveness and readiness probes, which carry no credentials,
	// as the kubelet's healthz port does. "" disables it.
	HealthzAddr string
	KubeAPIQPS  float32
	// KubeAPIContentType is the encoding of requests and answers
	// (--kube-api-content-type); "" means protobuf, as for the kubelet.
	KubeAPIContentType string
	KubeAPIBurst       int
	LeaseDuration      time.Duration
	RenewInterval      time.Duration

	// The kubelet API (HTTPS on KubeletPort; 0 picks a free port, which the node
	// then advertises). Its certificate: ServingCertFile/KeyFile, else self-signed
	// if SelfSignedServingCert, else a kubelet-serving CSR (approved by the node
	// itself if ApproveServingCSR) kept in CertDir.
	ServingCertFile, ServingKeyFile string
	SelfSignedServingCert           bool
	ApproveServingCSR               bool
	CertDir                         string
	// StreamIdleTimeout and StreamCreationTimeout bound exec, attach and
	// port-forward sessions (idle, and their handshake); zero: the kubelet's 4h
	// and 30s.
	StreamIdleTimeout, StreamCreationTimeout time.Duration
	// How long the kubelet API caches TokenReview answers and allowed and denied
	// SubjectAccessReviews; zero: the kubelet's 2m, 5m and 30s.
	TokenCacheTTL, AllowCacheTTL, DenyCacheTTL time.Duration
	// ClientCAFile authenticates client certificates (the API server's); empty
	// reads the cluster's client CA from kube-system/extension-apiserver-authentication.
	ClientCAFile string
	// NodeLabels, NodeTaints and NodeCapacity are the operator's additions to the
	// node (a NodeSet file's labels, taints and capacity); see node.Config.
	NodeLabels   map[string]string
	NodeTaints   []corev1.Taint
	NodeCapacity corev1.ResourceList
	// Tracing says where spans of pod syncs, provider calls and status writes go
	// (OTLP); off unless an endpoint is set here or in the OTEL_* variables.
	Tracing tracing.Config

	// ListenAddress is the IP the kubelet API listens on; empty: InternalIP, the
	// address the node advertises ("0.0.0.0" or "::" listen on every address).
	ListenAddress string
	// KubeletListener, if set, is where the kubelet API listens instead of
	// KubeletPort (for instance a socket in a network namespace, see internal/lab/netns).
	KubeletListener net.Listener
	// Shared, if set, is the machinery the node shares with the other nodes of
	// the process (NewShared): its client, and so its credential, watches,
	// caches and metrics.
	Shared *Shared
	// APIFeatures, if set, are the API server's features as the caller knows
	// them (apifeatures.Detect; apifeatures.Without() for every feature); nil:
	// New (or NewShared) reads them from the server, once per process and
	// server (apifeatures.go).
	APIFeatures *apifeatures.Set

	Logger *slog.Logger
}
