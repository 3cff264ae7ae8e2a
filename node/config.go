package node

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
)

// Config says which node to register and how to keep it alive. Zero durations,
// OperatingSystem, Architecture, Clock and Logger take the defaults documented on
// each field.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// ProviderName is the value of the virtual-kubelet.io/provider=<name>:NoSchedule
	// taint, which is put on the node unless DisableTaint. With DisableTaint, a taint
	// of that key left by an earlier run is removed.
	ProviderName string
	DisableTaint bool
	// AsNode says the client authenticates as the node itself
	// (system:node:<name>): the NodeRestriction admission plugin then refuses
	// labels in the kubernetes.io and k8s.io namespaces that a kubelet may not
	// set, so kubernetes.io/role is left out.
	AsNode bool
	// OperatingSystem and Architecture go to the kubernetes.io/os and
	// kubernetes.io/arch labels and to nodeInfo. Defaults: "linux", runtime.GOARCH.
	OperatingSystem string
	Architecture    string
	// InternalIP is the node's InternalIP address; NodeName is always its Hostname.
	InternalIP string
	// KubeletPort is where the kubelet API listens (status.daemonEndpoints).
	KubeletPort    int32
	KubeletVersion string
	// Provider may implement provider.NodeProvider (health and status updates) and
	// provider.NodeConfigurer (capacity, providerID, topology); it may be nil.
	Provider any
	// LeaseDuration is the lease's leaseDurationSeconds (default 40s); RenewInterval
	// how often it is renewed (default 10s) and must be shorter.
	LeaseDuration time.Duration
	RenewInterval time.Duration
	// StatusUpdateInterval is how often the whole status is written even when nothing
	// changed, refreshing the heartbeat times of the conditions (default 5m, the
	// kubelet's nodeStatusReportFrequency: the Lease, not the status, says the node
	// is alive, and a thousand idle nodes writing their status every minute would
	// cost the API server 17 writes a second for nothing).
	StatusUpdateInterval time.Duration
	// PingTimeout bounds each provider Ping (default 5s).
	PingTimeout time.Duration
	// Clock drives renewals and status refreshes and stamps the times written
	// (default: the real clock). Tests pass a fake one.
	Clock  clock.WithTicker
	Logger *slog.Logger

	// Labels and Taints are the operator's, added to the node's own (a label
	// given here wins over the provider's; the hostname label stays the node's
	// name). Capacity, if set, overrides the provider's capacity and allocatable
	// resource by resource.
	Labels   map[string]string
	Taints   []corev1.Taint
	Capacity corev1.ResourceList

	// Watch, if set, is the Node watch the controller shares with the other
	// nodes of the process; nil watches its own Node.
	Watch *Watch
	// OnReady, if set, is called once, when Ready is closed, on Run's
	// goroutine; it must not block. For a caller that would otherwise keep a
	// goroutine waiting on Ready.
	OnReady func()
	// Timer, if set, is the timer the controller shares with the other nodes of
	// the process for its lease renewals and status refreshes (it must run on
	// Clock); nil runs one of its own.
	Timer *sharedtimer.Timer
	// APIFeatures are the API server's features (apifeatures.Detect): on a
	// release without status.declaredFeatures the provider's declared
	// features are not written. nil: every feature, as the newest release.
	APIFeatures *apifeatures.Set
}

// withDefaults returns cfg with the zero fields filled in, or an error naming the
// first invalid one.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Client == nil {
		return cfg, errors.New("node: Config.Client is required")
	}
	if cfg.NodeName == "" {
		return cfg, errors.New("node: Config.NodeName is required")
	}
	if cfg.OperatingSystem == "" {
		cfg.OperatingSystem = "linux"
	}
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 10 * time.Second
	}
	if cfg.StatusUpdateInterval == 0 {
		cfg.StatusUpdateInterval = 5 * time.Minute
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if refused := refusedLabels(cfg.Labels); cfg.AsNode && len(refused) > 0 {
		// As the kubelet refuses such --node-labels: the operator asked for them.
		return cfg, fmt.Errorf("node %s: a node may not set the labels %s on itself (the NodeRestriction admission plugin refuses them); set them with another credential, or use a prefix outside kubernetes.io and k8s.io", cfg.NodeName, strings.Join(refused, ", "))
	}
	switch {
	case cfg.LeaseDuration < time.Second:
		return cfg, fmt.Errorf("node %s: LeaseDuration %s is under the 1s resolution of a lease", cfg.NodeName, cfg.LeaseDuration)
	case cfg.RenewInterval < 0 || cfg.RenewInterval >= cfg.LeaseDuration:
		return cfg, fmt.Errorf("node %s: RenewInterval %s must be positive and shorter than LeaseDuration %s", cfg.NodeName, cfg.RenewInterval, cfg.LeaseDuration)
	case cfg.StatusUpdateInterval < 0 || cfg.PingTimeout < 0:
		return cfg, fmt.Errorf("node %s: StatusUpdateInterval and PingTimeout must be positive", cfg.NodeName)
	}
	return cfg, nil
}
