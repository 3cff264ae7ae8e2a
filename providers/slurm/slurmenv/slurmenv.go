// Package slurmenv gives the Slurm provider a real Slurm cluster to talk to: munged,
// slurmctld and one slurmd, each with its own configuration, state, spool, logs and
// munge key in a temporary directory, talking to each other over 127.0.0.1. The
// provider's integration tests and `vkubelet up --provider slurm` use it; it is not
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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vkubelet/vkubelet/internal/spawn"
	"github.com/vkubelet/vkubelet/providers/cri/crienv"
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
	munged      *daemon
	slurmctld   *daemon
	slurmd      *daemon
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

// Start generates the configuration in a fresh temporary directory, starts munged,
// slurmctld and slurmd, and returns once the node is IDLE, that is when a job can
// run on it. (slurmctld still waits about three seconds after it starts before it
// schedules the first job; later jobs start within a second.) It fails with a
// clear message when a prerequisite is missing.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("slurmenv: slurmd and munged need root")
	}
	bins := map[string]string{}
	for _, name := range slices.Concat(daemons, commands) {
		path, err := lookPath(name)
		if err != nil {
			return nil, fmt.Errorf("slurmenv: %s not found: install slurm-wlm and munge (scripts/setup.sh): %w", name, err)
		}
		bins[name] = path
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

// hardware is what slurmd finds on this machine.
type hardware struct {
	cpus, boards, socketsPerBoard, coresPerSocket, threadsPerCore int
	memoryMiB                                                     int
}

// detectHardware asks slurmd itself (slurmd -C) rather than reading /proc: the node
// is drained if it declares more than slurmd reports when it registers.
func detectHardware(ctx context.Context, slurmd string) (hardware, error) {
	out, err := exec.CommandContext(ctx, slurmd, "-C").Output()
	if err != nil {
		return hardware{}, fmt.Errorf("slurmenv: slurmd -C: %w", err)
	}
	var hw hardware
	fields := map[string]*int{
		"CPUs": &hw.cpus, "Boards": &hw.boards, "SocketsPerBoard": &hw.socketsPerBoard,
		"CoresPerSocket": &hw.coresPerSocket, "ThreadsPerCore": &hw.threadsPerCore,
		"RealMemory": &hw.memoryMiB,
	}
	for _, f := range strings.Fields(string(out)) {
		k, v, ok := strings.Cut(f, "=")
		if p := fields[k]; ok && p != nil {
			if *p, err = strconv.Atoi(v); err != nil {
				return hardware{}, fmt.Errorf("slurmenv: slurmd -C: %s: %w", f, err)
			}
		}
	}
	if hw.cpus == 0 || hw.memoryMiB == 0 {
		return hardware{}, fmt.Errorf("slurmenv: slurmd -C reported no CPUs or memory: %q", out)
	}
	return hw, nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *Env) path(elem ...string) string {
	return filepath.Join(append([]string{e.Dir}, elem...)...)
}

// writeConfig writes slurm.conf, gres.conf, the munge key and the GPU placeholders.
// Every path is absolute because slurmctld and slurmd change directory.
func (e *Env) writeConfig(hw hardware) error {
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"munge", 0o755}, {"state", 0o700}, {"spool", 0o755}, {"dev", 0o755}} {
		if err := os.Mkdir(e.path(d.name), d.mode); err != nil {
			return err
		}
	}
	key := make([]byte, 128)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(e.path("munge", "munge.key"), key, 0o400); err != nil {
		return err
	}
	ctldPort, slurmdPort, err := freePorts()
	if err != nil {
		return err
	}
	gres := "AutoDetect=off\n"
	if e.GPUs > 0 {
		for i := range e.GPUs {
			if err := placeholderDevice(e.path("dev", fmt.Sprintf("nvidia%d", i))); err != nil {
				return err
			}
		}
		gres += fmt.Sprintf("NodeName=%s Name=gpu File=%s\n", e.NodeName, e.path("dev", fmt.Sprintf("nvidia[0-%d]", e.GPUs-1)))
	}
	// gres.conf is read from slurm.conf's directory.
	if err := os.WriteFile(e.path("gres.conf"), []byte(gres), 0o644); err != nil {
		return err
	}
	nodeGres := ""
	if e.GPUs > 0 {
		nodeGres = fmt.Sprintf(" Gres=gpu:%d", e.GPUs)
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# Generated by slurmenv for one test cluster; see providers/slurm/slurmenv.")
	line("ClusterName=%s", e.NodeName)
	// "localhost" always counts as this machine for slurmctld, whatever the host's name.
	line("SlurmctldHost=localhost(127.0.0.1)")
	line("SlurmctldPort=%d", ctldPort)
	line("SlurmdPort=%d", slurmdPort)
	line("SlurmUser=root")
	line("SlurmdUser=root")
	line("AuthType=auth/munge")
	line("CredType=cred/munge")
	line("AuthInfo=socket=%s", e.mungeSocket)
	line("StateSaveLocation=%s", e.path("state"))
	line("SlurmdSpoolDir=%s", e.path("spool"))
	line("SlurmctldPidFile=%s", e.path("slurmctld.pid"))
	line("SlurmdPidFile=%s", e.path("slurmd.pid"))
	// The daemons' own logs, with times; slurmd.log also has slurmstepd's messages.
	// (Their stderr, in *.out, has the same lines and any error from before the log
	// file is opened.)
	line("SlurmctldLogFile=%s", e.path("slurmctld.log"))
	line("SlurmdLogFile=%s", e.path("slurmd.log"))
	line("SlurmctldDebug=info")
	line("SlurmdDebug=info")
	// No cgroups: a test machine or container may not let us use them.
	line("ProctrackType=proctrack/linuxproc")
	line("TaskPlugin=task/none")
	line("JobAcctGatherType=jobacct_gather/none")
	line("AccountingStorageType=accounting_storage/none")
	line("JobCompType=jobcomp/none")
	line("MpiDefault=none")
	line("MailProg=/bin/true")
	line("SwitchType=switch/none")
	// Jobs share the node, counted by CPU (not whole cores) and memory.
	line("SelectType=select/cons_tres")
	line("SelectTypeParameters=CR_CPU_Memory")
	line("DefMemPerCPU=%d", defMemPerCPU)
	// slurmctld starts batch jobs in its scheduling passes, not on submission, and by
	// default lets three seconds go by between passes for new ones; now it is one.
	line("SchedulerParameters=batch_sched_delay=0")
	line("GresTypes=gpu")
	// A node that was down comes back as soon as its slurmd registers.
	line("ReturnToService=2")
	// Finished jobs stay visible to scontrol and squeue for ten minutes.
	line("MinJobAge=600")
	line("NodeName=%s NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=%d Boards=%d SocketsPerBoard=%d CoresPerSocket=%d ThreadsPerCore=%d RealMemory=%d%s State=UNKNOWN",
		e.NodeName, hw.cpus, hw.boards, hw.socketsPerBoard, hw.coresPerSocket, hw.threadsPerCore, e.MemoryMiB, nodeGres)
	line("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:%d", e.Partition, e.NodeName, jobsPerCPU)
	return os.WriteFile(e.Conf, []byte(b.String()), 0o644)
}

// placeholderDevice makes a stand-in for a GPU's device file. slurmd only checks that
// it exists (task/none opens nothing), but it complains unless it is a device, so it
// is a character device that behaves as /dev/null, or an empty file where the
// file system does not allow device nodes.
func placeholderDevice(path string) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
		return nil
	}
	return os.WriteFile(path, nil, 0o644)
}

// freePorts picks two ports that nothing listens on, below the kernel's ephemeral
// range: a port from that range could be taken as the local end of some outgoing
// connection (the client commands make many) between our check and the daemon's bind.
func freePorts() (int, int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const base = 10000
	if low <= base+100 {
		return 0, 0, fmt.Errorf("slurmenv: ephemeral port range starts at %d, leaving no ports for slurmctld and slurmd", low)
	}
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 200 {
		var n [2]byte
		_, _ = rand.Read(n[:])
		p := base + (int(n[0])<<8|int(n[1]))%(low-base)
		// Holding the listener keeps the second pick from choosing the same port.
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue
		}
		held = append(held, l)
		if ports = append(ports, p); len(ports) == 2 {
			return ports[0], ports[1], nil
		}
	}
	return 0, 0, errors.New("slurmenv: found no free TCP ports")
}

// daemon is one of the cluster's processes, started in the foreground so that it
// dies with us (internal/spawn) and we see when it exits.
type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// start runs the program with its output appended to log. The environment carries
// SLURM_CONF, which also marks the daemon's descendants as ours for Stop.
func (e *Env) start(log string, name string, args ...string) (*daemon, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &daemon{name: name, log: log, cmd: exec.Command(e.bins[name], args...), done: make(chan struct{})}
	d.cmd.Dir = e.Dir
	d.cmd.Env = e.Environ()
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := spawn.Start(d.cmd); err != nil {
		return nil, fmt.Errorf("slurmenv: start %s: %w", name, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// running reports whether the daemon was started and has not exited.
func (d *daemon) running() bool { return d != nil && !d.exited() }

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the daemon's process group, and SIGKILL if it has not
// exited after grace.
func (d *daemon) stop(grace time.Duration) {
	if !d.running() {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

// logTail is the end of the daemon's log, for error messages.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// permanentError is a readiness check's way of saying that waiting longer is no use.
type permanentError struct{ error }

// waitFor polls ready until it returns nil or a permanentError, the daemon exits, or
// the deadline passes.
func waitFor(ctx context.Context, d *daemon, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if errors.As(err, new(permanentError)) {
			return fmt.Errorf("slurmenv: %s: not %s: %w: %s", d.name, what, err, d.logTail())
		}
		select {
		case <-d.done:
			return fmt.Errorf("slurmenv: %s exited (%v) before %s: %s", d.name, d.err, what, d.logTail())
		case <-ctx.Done():
			return fmt.Errorf("slurmenv: %s: not %s (%v): %w: %s", d.name, what, err, ctx.Err(), d.logTail())
		case <-tick.C:
		}
	}
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
	if e.slurmctld.running() {
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
	if !e.slurmctld.running() {
		return errors.New("slurmenv: slurmctld is not running")
	}
	e.slurmctld.stop(30 * time.Second)
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
	if e.slurmctld.running() && e.slurmd.running() {
		e.cancelJobs()
	}
	if e.podmanStorage != "" {
		// Containers of a job Slurm killed outright outlive it (docs/SLURM.md).
		podman := e.podman()
		_ = exec.Command(podman[0], append(podman[1:], "rm", "--force", "--all", "--time=0")...).Run()
		defer func() { _ = crienv.RemoveAllMounted(e.podmanStorage) }()
	}
	e.slurmd.stop(10 * time.Second)
	e.slurmctld.stop(10 * time.Second)
	e.munged.stop(10 * time.Second)
	var errs []error
	if err := e.killLeftovers(); err != nil {
		errs = append(errs, err)
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
	for len(active()) > 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// killLeftovers kills the job steps' processes: every process whose environment has
// our SLURM_CONF (slurmstepd inherits it from slurmd, jobs from sbatch) and all its
// descendants, which may have dropped it. Without slurmd and slurmctld, slurmstepd
// would only wait to report, so there is no point in asking politely.
func (e *Env) killLeftovers() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := e.leftovers()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slurmenv: processes %v survive SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftovers lists the processes killLeftovers ends.
func (e *Env) leftovers() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	marker := []byte("SLURM_CONF=" + e.Conf + "\x00")
	children := map[int][]int{}
	var roots []int
	self := os.Getpid()
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
		if env, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "environ")); err == nil && bytes.Contains(env, marker) {
			roots = append(roots, pid)
		}
	}
	seen := map[int]bool{}
	var pids []int
	for len(roots) > 0 {
		pid := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if !isZombie(pid) {
			pids = append(pids, pid)
		}
		roots = append(roots, children[pid]...)
	}
	return pids, nil
}

// parentOf reads the parent's pid from /proc/PID/stat; 0 if the process is gone.
func parentOf(pid int) int {
	f, ok := stat(pid)
	if !ok || len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func isZombie(pid int) bool {
	f, ok := stat(pid)
	return !ok || f[0] == "Z"
}

// stat returns the fields of /proc/PID/stat after the command name, which may
// itself hold spaces and parentheses: state, ppid, ...
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) > 0
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
