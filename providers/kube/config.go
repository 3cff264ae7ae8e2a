package kube

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// Namespace strategies of Config.NamespaceStrategy.
const (
	NamespaceSame   = "same"
	NamespaceSuffix = "suffix"
)

// Config is the provider's JSON configuration file (--provider-config).
type Config struct {
	// Kubeconfig is the path of the kubeconfig of the target cluster (required).
	Kubeconfig string `json:"kubeconfig"`
	// Context is the kubeconfig context; empty uses the current one.
	Context string `json:"context,omitempty"`
	// ClusterID names the source cluster in the target: in labels, annotations and
	// (with the "suffix" strategy) namespaces. Empty: "source".
	ClusterID string `json:"clusterID,omitempty"`
	// NamespaceStrategy is "suffix" (default: "<ns>-<clusterID>") or "same".
	NamespaceStrategy string `json:"namespaceStrategy,omitempty"`
	// StripNodeSelector, StripAffinity and StripTolerations drop those fields from
	// the target pod.
	StripNodeSelector bool `json:"stripNodeSelector,omitempty"`
	StripAffinity     bool `json:"stripAffinity,omitempty"`
	StripTolerations  bool `json:"stripTolerations,omitempty"`
	// CountNodes is the label selector of the target nodes whose capacity counts.
	// Empty: "type!=virtual-kubelet" (virtual nodes, this provider's kind included,
	// are not counted, so capacity is never counted twice nor in a loop).
	CountNodes string `json:"countNodes,omitempty"`
	// Capacity caps the node's capacity per resource, e.g. {"cpu": "100", "pods": "500"}.
	Capacity map[string]string `json:"capacity,omitempty"`
	// PingTimeout bounds the /readyz check, as a duration string ("2s"). Zero: 5s.
	PingTimeout providerutil.Duration `json:"pingTimeout,omitzero"`
	// QPS and Burst of the target client. Zero: 50 and 100.
	QPS   float32 `json:"qps,omitempty"`
	Burst int     `json:"burst,omitempty"`

	pingTimeout time.Duration
	capacity    corev1.ResourceList
	countNodes  labels.Selector
}

// LoadConfig reads and checks the configuration file at path. Unknown fields are
// errors. The file is required: it names the target's kubeconfig.
func LoadConfig(path string) (Config, error) {
	var c Config
	if path == "" {
		return c, fmt.Errorf("kube provider: --provider-config with a kubeconfig is required")
	}
	if err := providerutil.DecodeJSONFile(path, &c); err != nil {
		return Config{}, fmt.Errorf("kube provider config: %w", err)
	}
	if err := c.complete(); err != nil {
		return Config{}, fmt.Errorf("kube provider config %s: %w", path, err)
	}
	return c, nil
}

// complete checks c and fills in defaults.
func (c *Config) complete() error {
	if c.ClusterID == "" {
		c.ClusterID = "source"
	}
	switch c.NamespaceStrategy {
	case "":
		c.NamespaceStrategy = NamespaceSuffix
	case NamespaceSame, NamespaceSuffix:
	default:
		return fmt.Errorf("namespaceStrategy %q: want %q or %q", c.NamespaceStrategy, NamespaceSuffix, NamespaceSame)
	}
	if c.Kubeconfig == "" {
		return fmt.Errorf("kubeconfig (of the target cluster) is required")
	}
	c.pingTimeout = 5 * time.Second
	if c.PingTimeout.Duration > 0 {
		c.pingTimeout = c.PingTimeout.Duration
	}
	c.capacity = corev1.ResourceList{}
	for k, v := range c.Capacity {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("capacity %s: %w", k, err)
		}
		c.capacity[corev1.ResourceName(k)] = q
	}
	if c.CountNodes == "" {
		c.CountNodes = "type!=virtual-kubelet"
	}
	sel, err := labels.Parse(c.CountNodes)
	if err != nil {
		return fmt.Errorf("countNodes: %w", err)
	}
	c.countNodes = sel
	if c.QPS == 0 {
		c.QPS = 50
	}
	if c.Burst == 0 {
		c.Burst = 100
	}
	return nil
}
