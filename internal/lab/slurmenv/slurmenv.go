// Package slurmenv gives the Slurm provider a real Slurm cluster to talk to: munged,
// slurmctld and one slurmd, each with its own configuration, state, spool, logs and
// munge key in a temporary directory, talking to each other over 127.0.0.1. The
// provider's integration tests and `vkubeletctl up --provider slurm` use it; it is not
// a way to run a cluster for anything else.
//
// The node is the machine itself (its real CPUs and memory) and can declare GPUs
// backed by placeholder device files, so that jobs asking for --gres=gpu are
// scheduled. Several jobs share the node at once, as the provider's pods do.
//
// It needs root, slurm-wlm and munge, which scripts/setup.sh installs; Start reports
// which one is missing. Two Envs, in one process or two, share nothing: each has its
// own ports, cluster and node name, munge key and socket.
//
// When something goes wrong, the logs are in Dir: slurmctld.log, slurmd.log (which
// also has slurmstepd's messages) and munged.out; set SLURMENV_KEEP=1 to keep Dir.
package slurmenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// keepEnv names the environment variable that, when set to anything, makes Stop
// leave Dir in place so that its logs and state can be read after a failed run.
const keepEnv = "SLURMENV_KEEP"

// jobsPerCPU is how many jobs may share one CPU. The provider runs every pod as a job
// on the one node, and test machines have few CPUs, so CPUs are oversubscribed
// rather than allocated exclusively; memory and GPUs still are not.
const jobsPerCPU = 128

// defMemPerCPU is the memory (MiB) a job gets when it does not ask: without it, a job
// with no --mem is given all of the node's memory and nothing else can start beside it.
const defMemPerCPU = 256

// startTimeout bounds each wait in Start and StartController beyond the caller's ctx.
const startTimeout = 60 * time.Second

// Options says what the cluster's node offers beyond the machine's CPUs and memory.
type Options struct {
	GPUs int // GPUs declared in gres.conf, backed by placeholder device files; 0 = none
}

// Env is a running cluster. Its methods are not safe for concurrent use.
type Env struct {
	Dir       string // temporary directory holding config, state, logs, munge socket
	Conf      string // absolute path of the generated slurm.conf
	NodeName  string // the one compute node's Slurm name
	CPUs      int    // CPUs declared for the node (the machine's real count)
	MemoryMiB int    // memory declared (real, a bit under the machine's total)
	GPUs      int
	Partition string // the default partition's name

	podmanStorage string // made by ProviderConfig; its containers removed by Stop

	bins        map[string]string // absolute paths of the daemons and commands
	mungeSocket string
	munged      *spawn.Process
	slurmctld   *spawn.Process
	slurmd      *spawn.Process
}

// Daemons are looked up in /usr/sbin too: a root shell reached through sudo or su
// may not have it in its PATH. slurmd runs slurmstepd from there in any case.
var (
	daemons  = []string{"munged", "slurmctld", "slurmd", "slurmstepd"}
	commands = []string{"sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo"}
)

// lookPath finds a program in PATH or, failing that, in /usr/sbin.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	if _, serr := exec.LookPath(filepath.Join("/usr/sbin", name)); serr == nil {
		return filepath.Join("/usr/sbin", name), nil
	}
	return "", err
}

// Available says why Start cannot work on this machine, or nil: Slurm's
// daemons need root, and Slurm and munge must be installed (scripts/setup.sh
// --slurm installs them).
func Available() error {
	_, err := programs()
	return err
}

// PodmanAvailable says why ProviderConfig's podman, which runs each job's
// containers, cannot work on this machine, or nil: its rootful mode needs root,
// and scripts/setup.sh --slurm installs it.
func PodmanAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("podman's rootful mode needs root")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		return fmt.Errorf("podman not found (scripts/setup.sh --slurm installs it): %w", err)
	}
	return nil
}

// programs finds Slurm's and munge's programs, by name.
func programs() (map[string]string, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("slurmenv: slurmd and munged need root")
	}
	bins := map[string]string{}
	for _, name := range slices.Concat(daemons, commands) {
		path, err := lookPath(name)
		if err != nil {
			return nil, fmt.Errorf("slurmenv: %s not found (scripts/setup.sh --slurm installs slurm-wlm and munge): %w", name, err)
		}
		bins[name] = path
	}
	return bins, nil
}

// Start generates the configuration in a fresh temporary directory, starts munged,
// slurmctld and slurmd, and returns once the node is IDLE, that is when a job can
// run on it. (slurmctld still waits about three seconds after it starts before it
// schedules the first job; later jobs start within a second.) It fails with a
// clear message when a prerequisite is missing.
func Start(ctx context.Context, opts Options) (*Env, error) {
	bins, err := programs()
	if err != nil {
		return nil, err
	}
	if opts.GPUs < 0 {
		return nil, fmt.Errorf("slurmenv: negative GPU count %d", opts.GPUs)
	}
	hw, err := detectHardware(ctx, bins["slurmd"])
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "slurmenv-")
	if err != nil {
		return nil, err
	}
	// munged refuses a socket in a directory that not everyone may enter, and jobs
	// of any user need to read slurm.conf; the secrets below have their own modes.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	name := "vk" + randomSuffix()
	e := &Env{
		Dir:         dir,
		Conf:        filepath.Join(dir, "slurm.conf"),
		NodeName:    name,
		CPUs:        hw.cpus,
		MemoryMiB:   hw.memoryMiB * 95 / 100,
		GPUs:        opts.GPUs,
		Partition:   "vkubelet",
		mungeSocket: filepath.Join(dir, "munge", "munge.socket"),
		bins:        bins,
	}
	if err := e.writeConfig(hw); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.startMunge(ctx); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.StartController(ctx); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.startSlurmd(ctx); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) startMunge(ctx context.Context) error {
	d, err := e.start(e.path("munged.out"), "munged", "--foreground",
		"--key-file="+e.path("munge", "munge.key"),
		"--socket="+e.mungeSocket,
		"--pid-file="+e.path("munge", "munged.pid"),
		"--seed-file="+e.path("munge", "munged.seed"))
	if err != nil {
		return err
	}
	e.munged = d
	return waitFor(ctx, d, "listening on "+e.mungeSocket, func(context.Context) error {
		c, err := net.Dial("unix", e.mungeSocket)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// StartController starts slurmctld, which recovers the jobs in its state directory,
// and waits until it answers. Once slurmd runs, it also waits until the node is no
// longer UNKNOWN: a restarted slurmctld shows a node that had no jobs so until its
// slurmd registers again, a few seconds later (a busy node keeps its state).
func (e *Env) StartController(ctx context.Context) error {
	if e.slurmctld.Running() {
		return errors.New("slurmenv: slurmctld is already running")
	}
	d, err := e.start(e.path("slurmctld.out"), "slurmctld", "-D", "-f", e.Conf)
	if err != nil {
		return err
	}
	e.slurmctld = d
	err = waitFor(ctx, d, "answering", func(ctx context.Context) error {
		out, err := e.run(ctx, "scontrol", "ping")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "is UP") {
			return errors.New(strings.TrimSpace(out))
		}
		return nil
	})
	if err != nil || e.slurmd == nil {
		return err
	}
	return waitFor(ctx, d, "in touch with the node", func(ctx context.Context) error {
		state, err := e.nodeState(ctx)
		if err != nil {
			return err
		}
		if strings.HasPrefix(state, "UNKNOWN") || strings.Contains(state, "NOT_RESPONDING") {
			return fmt.Errorf("node %s is %s", e.NodeName, state)
		}
		return nil
	})
}

// StopController stops slurmctld alone, as when the controller goes down while the
// node and its jobs carry on. It saves its state before it exits.
func (e *Env) StopController() error {
	if !e.slurmctld.Running() {
		return errors.New("slurmenv: slurmctld is not running")
	}
	e.slurmctld.Stop(30 * time.Second)
	return nil
}

func (e *Env) startSlurmd(ctx context.Context) error {
	d, err := e.start(e.path("slurmd.out"), "slurmd", "-D", "-N", e.NodeName, "-f", e.Conf)
	if err != nil {
		return err
	}
	e.slurmd = d
	return waitFor(ctx, d, "IDLE", func(ctx context.Context) error {
		state, err := e.nodeState(ctx)
		if err != nil {
			return err
		}
		switch {
		case state == "IDLE":
			return nil
		case strings.Contains(state, "DRAIN") || strings.Contains(state, "INVALID_REG"):
			// For instance when the machine has less memory than slurmd -C said.
			return permanentError{fmt.Errorf("node %s is %s", e.NodeName, state)}
		default:
			return fmt.Errorf("node %s is %s", e.NodeName, state)
		}
	})
}

// nodeState is the node's state as scontrol shows it: a base state and flags, such
// as IDLE, MIXED or IDLE+DRAIN, with the reason appended if there is one.
func (e *Env) nodeState(ctx context.Context) (string, error) {
	out, err := e.run(ctx, "scontrol", "--oneliner", "show", "node", e.NodeName)
	if err != nil {
		return "", err
	}
	state := field(out, "State")
	// The reason, which has spaces, comes last.
	if _, reason, ok := strings.Cut(out, " Reason="); ok {
		state += " (" + strings.TrimSpace(reason) + ")"
	}
	return state, nil
}

// field returns the value of key in scontrol's one-line key=value output.
func field(out, key string) string {
	for _, f := range strings.Fields(out) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// run runs a Slurm client command against this cluster and returns its output.
func (e *Env) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.bins[name], args...)
	cmd.Env = e.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Environ returns the environment the Slurm client commands (sbatch, squeue,
// scontrol, scancel, srun, sinfo) need to talk to this cluster: ours, with
// SLURM_CONF pointing at Conf. Variables that steer those commands elsewhere are
// dropped: inside a job of another cluster SLURM_JOB_ID and friends would make srun
// a step of that job, and SQUEUE_FORMAT and the like would change what they print.
func (e *Env) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !isSlurmVar(kv) {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+e.Conf)
}

func isSlurmVar(kv string) bool {
	for _, p := range []string{"SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCANCEL_", "SCONTROL_"} {
		if strings.HasPrefix(kv, p) {
			return true
		}
	}
	return false
}

// Stop cancels the jobs that are left, ends slurmd, slurmctld and munged, then kills
// what remains of the jobs (slurmstepd outlives slurmd by design), and removes Dir
// unless SLURMENV_KEEP is set in the environment. It is safe to call on a partly started
// Env and more than once.
func (e *Env) Stop() error {
	if e.slurmctld.Running() && e.slurmd.Running() {
		e.cancelJobs()
	}
	if e.podmanStorage != "" {
		// Containers of a job Slurm killed outright outlive it (docs/SLURM.md).
		podman := e.podman()
		_ = exec.Command(podman[0], append(podman[1:], "rm", "--force", "--all", "--time=0")...).Run()
		defer func() { _ = crienv.RemoveAllMounted(e.podmanStorage) }()
	}
	e.slurmd.Stop(10 * time.Second)
	e.slurmctld.Stop(10 * time.Second)
	e.munged.Stop(10 * time.Second)
	var errs []error
	if err := e.killLeftovers(); err != nil {
		errs = append(errs, err)
	}
	if e.podmanStorage != "" {
		// And the containers a job created after the first removal.
		podman := e.podman()
		_ = exec.Command(podman[0], append(podman[1:], "rm", "--force", "--all", "--time=0")...).Run()
	}
	if os.Getenv(keepEnv) == "" {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cancelJobs cancels every job that has not finished and waits a little for them to
// end, so that their programs get SIGTERM from Slurm, as a cancelled job's do, and
// slurmstepd can report and exit while it still has someone to report to.
func (e *Env) cancelJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	active := func() []string {
		out, err := e.run(ctx, "squeue", "--noheader", "--format=%i")
		if err != nil {
			return nil
		}
		return strings.Fields(out)
	}
	ids := active()
	if len(ids) == 0 {
		return
	}
	if _, err := e.run(ctx, "scancel", ids...); err != nil {
		return
	}
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(active()) == 0, nil
	})
}

// ProviderConfig is a configuration of the Slurm provider for this cluster: pods'
// directories under Dir/jobs, podman with storage of its own (vfs: nothing left
// mounted) removed with its containers by Stop, resource limits that root without
// CAP_SYS_RESOURCE may set. registry (host:port, plain HTTP), if set, is pulled
// from without TLS and stands in for Docker Hub, so that `--image=busybox` works
// on a machine without internet access.
func (e *Env) ProviderConfig(registry string) (slurm.Config, error) {
	if e.podmanStorage == "" {
		// podman refuses a run root longer than 50 characters.
		dir, err := os.MkdirTemp("/tmp", "pm")
		if err != nil {
			return slurm.Config{}, err
		}
		e.podmanStorage = dir
	}
	cfg := slurm.Config{
		JobRoot: e.path("jobs"), SlurmConf: e.Conf, Partition: e.Partition,
		Podman: e.podman(), CreateFlags: slurm.TestCreateFlags,
		PollInterval: providerutil.Duration{Duration: 500 * time.Millisecond},
		NodeRefresh:  providerutil.Duration{Duration: 5 * time.Second},
		Timeout:      providerutil.Duration{Duration: 10 * time.Second},
	}
	if registry != "" {
		cfg.InsecureRegistries = []string{registry}
		conf := fmt.Sprintf(`unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"

[[registry]]
prefix = "docker.io"
location = "docker.io"

[[registry.mirror]]
location = %q
insecure = true
`, registry)
		path := filepath.Join(e.podmanStorage, "registries.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return slurm.Config{}, err
		}
		cfg.Podman = append([]string{"env", "CONTAINERS_REGISTRIES_CONF=" + path}, cfg.Podman...)
	}
	return cfg, nil
}

func (e *Env) podman() []string {
	return []string{"podman", "--root=" + filepath.Join(e.podmanStorage, "root"), "--runroot=" + filepath.Join(e.podmanStorage, "run"),
		"--storage-driver=vfs", "--cgroup-manager=cgroupfs", "--events-backend=file"}
}
