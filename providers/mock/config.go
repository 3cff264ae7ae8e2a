package mock

import (
	"errors"
	"fmt"

	"github.com/vkubelet/vkubelet/providers/providerutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of the fields of Config left empty.
const (
	DefaultCPU    = "20"
	DefaultMemory = "100Gi"
	DefaultPods   = "1000"
)

// Config is the mock's configuration, read from the JSON file given by
// --provider-config. Every field is optional; see the package doc for what each one
// changes in the mock's behaviour.
type Config struct {
	// CPU, Memory and Pods are the node's capacity (and allocatable) of cpu, memory
	// and pods, as Kubernetes quantities.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	Pods   string `json:"pods,omitempty"`
	// Extended resources added to capacity and allocatable, e.g. {"nvidia.com/gpu": "4"}.
	Extended map[string]string `json:"extended,omitempty"`

	// Zone and Region become the topology.kubernetes.io/zone and /region labels of
	// the node when non-empty.
	Zone   string `json:"zone,omitempty"`
	Region string `json:"region,omitempty"`
	// ProviderID is the node's spec.providerID; empty means "mock://<node name>".
	ProviderID string `json:"providerID,omitempty"`

	// StartDelay is how long a created pod stays Pending (ContainerCreating) before it
	// runs; 0 means it runs as soon as CreatePod returns.
	StartDelay Duration `json:"startDelay,omitzero"`
	// StopDelay is how long a deleted pod takes to stop, capped by its grace period.
	StopDelay Duration `json:"stopDelay,omitzero"`
	// StopOverrun is how much longer than that a deleted pod takes to stop: a
	// back end whose stop outlasts the grace period (a remote cluster's pod
	// still terminating, a batch job being cancelled, a slow cloud API), for
	// trying what the node does meanwhile. 0: none.
	StopOverrun Duration `json:"stopOverrun,omitzero"`

	// Latency is how long every CreatePod, UpdatePod, DeletePod and GetPodStatus
	// call takes before it answers (injected failures included), as a remote
	// back end would; 0 answers at once. A call whose context ends first fails
	// with the context's error.
	Latency Duration `json:"latency,omitzero"`

	// FailureRate is the fraction, in [0, 1], of CreatePod, UpdatePod and DeletePod
	// calls that fail with an errdefs.Unavailable error before doing anything.
	FailureRate float64 `json:"failureRate,omitempty"`
	// Seed seeds the failure-injection RNG; 0 seeds it from the time.
	Seed int64 `json:"seed,omitempty"`

	// StateFile, when set, is where the pods and the per-UID call counts are kept, so
	// that a process restarted after a crash finds its pods again.
	StateFile string `json:"stateFile,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("3s").
type Duration = providerutil.Duration

// LoadConfig reads the JSON configuration at path and fills in the defaults. An empty
// path gives the defaults. Unknown fields are errors, so that a typo does not silently
// leave a default in place.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path != "" {
		if err := providerutil.DecodeJSONFile(path, &cfg); err != nil {
			return Config{}, fmt.Errorf("mock provider config: %w", err)
		}
	}
	cfg = cfg.withDefaults()
	if _, err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("mock provider config %s: %w", path, err)
	}
	return cfg, nil
}

// withDefaults returns c with the empty capacity fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.CPU == "" {
		c.CPU = DefaultCPU
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if c.Pods == "" {
		c.Pods = DefaultPods
	}
	return c
}

// validate checks c (defaults already applied) and returns the node capacity it
// describes.
func (c Config) validate() (corev1.ResourceList, error) {
	capacity := corev1.ResourceList{}
	add := func(field string, name corev1.ResourceName, value string) error {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", field, value, err)
		}
		if q.Sign() < 0 {
			return fmt.Errorf("%s: %q is negative", field, value)
		}
		capacity[name] = q
		return nil
	}
	if err := add("cpu", corev1.ResourceCPU, c.CPU); err != nil {
		return nil, err
	}
	if err := add("memory", corev1.ResourceMemory, c.Memory); err != nil {
		return nil, err
	}
	if err := add("pods", corev1.ResourcePods, c.Pods); err != nil {
		return nil, err
	}
	for name, value := range c.Extended {
		if name == "" {
			return nil, errors.New("extended: empty resource name")
		}
		if err := add("extended["+name+"]", corev1.ResourceName(name), value); err != nil {
			return nil, err
		}
	}
	if c.StartDelay.Duration < 0 {
		return nil, fmt.Errorf("startDelay: %s is negative", c.StartDelay)
	}
	if c.StopDelay.Duration < 0 {
		return nil, fmt.Errorf("stopDelay: %s is negative", c.StopDelay)
	}
	if c.StopOverrun.Duration < 0 {
		return nil, fmt.Errorf("stopOverrun: %s is negative", c.StopOverrun)
	}
	if !(c.FailureRate >= 0 && c.FailureRate <= 1) {
		return nil, fmt.Errorf("failureRate: %v is not in [0, 1]", c.FailureRate)
	}
	return capacity, nil
}
