package slurm

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// Config is the provider's JSON configuration (--provider-config).
type Config struct {
	// JobRoot holds one directory per pod: its job script, volumes, container logs
	// and exit codes. The compute nodes must see it at the same path (a shared
	// filesystem). Required.
	JobRoot string `json:"jobRoot"`
	// SlurmConf, if set, is passed to every Slurm command as SLURM_CONF.
	SlurmConf string `json:"slurmConf,omitempty"`
	// BinDir is where sbatch, squeue, scancel, scontrol, sinfo and srun are; empty:
	// found on PATH.
	BinDir string `json:"binDir,omitempty"`
	// Partition, Account and QOS are the jobs' defaults; a pod's annotations
	// (slurm.vkubelet.io/partition, …) override them.
	Partition string `json:"partition,omitempty"`
	Account   string `json:"account,omitempty"`
	QOS       string `json:"qos,omitempty"`
	// SbatchFlags are added to every submission, before the pod's own.
	SbatchFlags []string `json:"sbatchFlags,omitempty"`
	// Podman is the podman command on the compute nodes, with any global options
	// (--root, --runroot, --cgroup-manager, …) as further words. Default:
	// ["podman", "--cgroup-manager=cgroupfs", "--events-backend=file"], which needs
	// neither systemd nor journald on the compute node.
	Podman []string `json:"podman,omitempty"`
	// CreateFlags are added to every podman create: --ulimit where root may not
	// raise resource limits (podman asks for 1048576 files and processes by
	// default), --security-opt, --device, …
	CreateFlags []string `json:"createFlags,omitempty"`
	// InsecureRegistries are pulled from over plain HTTP or without verifying TLS
	// (podman --tls-verify=false), as host[:port].
	InsecureRegistries []string `json:"insecureRegistries,omitempty"`
	// PollInterval is how often the jobs' states are asked for (one squeue for
	// all). Default 2s.
	PollInterval providerutil.Duration `json:"pollInterval,omitzero"`
	// NodeRefresh is how often the node's capacity is read again from sinfo.
	// Default 1m.
	NodeRefresh providerutil.Duration `json:"nodeRefresh,omitzero"`
	// Timeout bounds each Slurm command. Default 30s.
	Timeout providerutil.Duration `json:"timeout,omitzero"`
	// MaxPods is the node's pod capacity. Default 110, as the kubelet's.
	MaxPods int `json:"maxPods,omitempty"`
}

// LoadConfig reads a Config from a JSON file, strictly, and applies defaults.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path == "" {
		return cfg, errors.New("slurm provider: --provider-config must name at least the jobRoot")
	}
	if err := providerutil.DecodeJSONFile(path, &cfg); err != nil {
		return cfg, fmt.Errorf("slurm provider config: %w", err)
	}
	if err := cfg.complete(); err != nil {
		return cfg, fmt.Errorf("slurm provider config %s: %w", path, err)
	}
	return cfg, nil
}

// complete checks cfg and fills in its defaults.
func (cfg *Config) complete() error {
	if cfg.JobRoot == "" {
		return errors.New("jobRoot is required")
	}
	if !filepath.IsAbs(cfg.JobRoot) {
		return fmt.Errorf("jobRoot %q must be an absolute path (the compute nodes use it as is)", cfg.JobRoot)
	}
	if len(cfg.Podman) == 0 {
		cfg.Podman = []string{"podman", "--cgroup-manager=cgroupfs", "--events-backend=file"}
	}
	if cfg.PollInterval.Duration <= 0 {
		cfg.PollInterval.Duration = 2 * time.Second
	}
	if cfg.NodeRefresh.Duration <= 0 {
		cfg.NodeRefresh.Duration = time.Minute
	}
	if cfg.Timeout.Duration <= 0 {
		cfg.Timeout.Duration = 30 * time.Second
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = 110
	}
	for _, f := range cfg.SbatchFlags {
		if err := checkSbatchFlag(f); err != nil {
			return fmt.Errorf("sbatchFlags: %w", err)
		}
	}
	return nil
}

// TestCreateFlags are the CreateFlags of the tests and `vkubeletctl up --provider
// slurm`: resource limits low enough that root without CAP_SYS_RESOURCE (as in
// a container) may set them.
var TestCreateFlags = []string{"--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096"}
