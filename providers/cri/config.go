package cri

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/providers/providerutil"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of the fields of Config left empty.
const (
	DefaultRuntimeEndpoint = "/run/containerd/containerd.sock"
	DefaultRootDir         = "/var/lib/vkubelet/cri"
	DefaultPods            = "110"
	// DefaultBackoffBase and DefaultBackoffMax are the kubelet's crash-loop back-off:
	// 10s, doubling, at most 5m.
	DefaultBackoffBase  = 10 * time.Second
	DefaultBackoffMax   = 5 * time.Minute
	DefaultSyncInterval = 500 * time.Millisecond
	// DefaultClusterDomain and DefaultResolvConf are the kubelet's defaults of
	// --cluster-domain and --resolv-conf.
	DefaultClusterDomain = "cluster.local"
	DefaultResolvConf    = "/etc/resolv.conf"
)

// Network modes of Config.Network.
const (
	// NetworkCNI gives each pod without hostNetwork its own network namespace, set up
	// by the runtime's CNI configuration.
	NetworkCNI = "cni"
	// NetworkHost runs every pod in the host's network namespace, as if it had
	// hostNetwork: for machines without a CNI configuration.
	NetworkHost = "host"
)

// Config is the CRI provider's configuration, read from the JSON file given by
// --provider-config. Every field is optional.
type Config struct {
	// RuntimeEndpoint is the CRI socket: a path or a unix:// URL.
	RuntimeEndpoint string `json:"runtimeEndpoint,omitempty"`
	// RootDir holds the provider's files: pods/<uid>/ (the pod as accepted, volume
	// contents, emptyDirs) and logs/ (the containers' CRI log files).
	RootDir string `json:"rootDir,omitempty"`
	// Network is NetworkCNI (default) or NetworkHost.
	Network string `json:"network,omitempty"`
	// Pods is the node's pods capacity, as a Kubernetes quantity.
	Pods string `json:"pods,omitempty"`
	// HostIP is the pods' hostIP (and podIP of host-network pods); empty means the
	// node's InternalIP, else the first non-loopback IPv4 address of the host.
	HostIP string `json:"hostIP,omitempty"`
	// AllowPrivileged lets containers run privileged; without it such pods are
	// refused with an InvalidInput error.
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`
	// BackoffBase and BackoffMax bound the delay before a crashed container is
	// restarted (and an image pull retried): BackoffBase, doubling each time, at most
	// BackoffMax.
	BackoffBase Duration `json:"backoffBase,omitzero"`
	BackoffMax  Duration `json:"backoffMax,omitzero"`
	// SyncInterval is how often each pod's state is read from the runtime (and
	// probes are considered).
	SyncInterval Duration `json:"syncInterval,omitzero"`
	// ClusterDNS are the IP addresses of the cluster's DNS servers, the only
	// nameservers of pods with dnsPolicy ClusterFirst (the kubelet's --cluster-dns).
	// Without them such pods get the node's resolver configuration, as with Default.
	ClusterDNS []string `json:"clusterDNS,omitempty"`
	// ClusterDomain is the cluster's DNS domain: the search list of ClusterFirst
	// pods and the FQDN of pods with a subdomain end with it.
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// ResolvConf is the node's resolver configuration, which pods with dnsPolicy
	// Default get (and ClusterFirst pods the search list of). Unlike the kubelet's
	// --resolv-conf, empty means the default: there is no "no file".
	ResolvConf string `json:"resolvConf,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("3s").
type Duration = providerutil.Duration

// LoadConfig reads the JSON configuration at path ("" gives the defaults) and fills
// in the defaults. Unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path != "" {
		if err := providerutil.DecodeJSONFile(path, &cfg); err != nil {
			return Config{}, fmt.Errorf("cri provider config: %w", err)
		}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("cri provider config %s: %w", path, err)
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	if c.RuntimeEndpoint == "" {
		c.RuntimeEndpoint = DefaultRuntimeEndpoint
	}
	if c.RootDir == "" {
		c.RootDir = DefaultRootDir
	}
	if c.Network == "" {
		c.Network = NetworkCNI
	}
	if c.Pods == "" {
		c.Pods = DefaultPods
	}
	if c.BackoffBase.Duration == 0 {
		c.BackoffBase.Duration = DefaultBackoffBase
	}
	if c.BackoffMax.Duration == 0 {
		c.BackoffMax.Duration = DefaultBackoffMax
	}
	if c.SyncInterval.Duration == 0 {
		c.SyncInterval.Duration = DefaultSyncInterval
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = DefaultClusterDomain
	}
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	return c
}

func (c Config) validate() error {
	if c.Network != NetworkCNI && c.Network != NetworkHost {
		return fmt.Errorf("network: %q is neither %q nor %q", c.Network, NetworkCNI, NetworkHost)
	}
	if q, err := resource.ParseQuantity(c.Pods); err != nil || q.Sign() < 0 {
		return fmt.Errorf("pods: %q is not a non-negative quantity", c.Pods)
	}
	if c.BackoffBase.Duration < 0 || c.BackoffMax.Duration < c.BackoffBase.Duration {
		return fmt.Errorf("backoffBase %s and backoffMax %s: need 0 < base <= max", c.BackoffBase, c.BackoffMax)
	}
	if c.SyncInterval.Duration < 0 {
		return fmt.Errorf("syncInterval: %s is negative", c.SyncInterval)
	}
	for _, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			return fmt.Errorf("clusterDNS: %q is not an IP address", ip)
		}
	}
	return nil
}

// endpoint returns the runtime endpoint as a gRPC target.
func (c Config) endpoint() string {
	if strings.Contains(c.RuntimeEndpoint, "://") {
		return c.RuntimeEndpoint
	}
	return "unix://" + c.RuntimeEndpoint
}
