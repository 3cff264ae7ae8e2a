package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vkubelet/vkubelet/errdefs"
)

// cli runs the Slurm client commands: the provider's only way to the cluster.
type cli struct {
	binDir  string
	env     []string // os.Environ() plus SLURM_CONF when configured
	timeout time.Duration
}

func newCLI(cfg Config) *cli {
	env := os.Environ()
	if cfg.SlurmConf != "" {
		env = append(env, "SLURM_CONF="+cfg.SlurmConf)
	}
	return &cli{binDir: cfg.BinDir, env: env, timeout: cfg.Timeout.Duration}
}

// command returns the exec.Cmd for a Slurm command, with the cluster's environment.
func (c *cli) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := name
	if c.binDir != "" {
		path = filepath.Join(c.binDir, name)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = c.env
	return cmd
}

// run runs a Slurm command within the timeout and returns its standard output.
// A failure carries the command's standard error; one that says the controller
// cannot be reached is errdefs.Unavailable.
func (c *cli) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := c.command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		err = fmt.Errorf("%s %s: %s", name, strings.Join(args, " "), msg)
		if unreachable(msg) || ctx.Err() != nil {
			return nil, errdefs.AsUnavailable(err)
		}
		return stdout.Bytes(), err
	}
	return stdout.Bytes(), nil
}

// unreachable tells whether a command's error says slurmctld did not answer.
func unreachable(msg string) bool {
	for _, s := range []string{"Unable to contact slurm controller", "Socket timed out", "Connection refused",
		"Zero Bytes were transmitted or received", "slurm_load_jobs error: Unable to contact"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// submit submits the script with sbatch and returns the job's ID.
func (c *cli) submit(ctx context.Context, script string, flags []string) (string, error) {
	args := append([]string{"--parsable"}, flags...)
	out, err := c.run(ctx, "sbatch", append(args, script)...)
	if err != nil {
		if errdefs.IsUnavailable(err) {
			return "", err
		}
		// sbatch refuses what the cluster cannot run (an unknown partition, too
		// many GPUs): the pod's fault, not worth retrying.
		return "", errdefs.AsInvalidInput(err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";") // "id;cluster" on federations
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", fmt.Errorf("sbatch answered %q, not a job ID", out)
	}
	return id, nil
}

// job is one line of squeue: what Slurm says of a job.
type job struct {
	ID     string
	State  string // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, …
	Node   string // where it runs or ran
	Name   string
	Reason string // why it is pending or how it ended ("Resources", "NonZeroExitCode", …)
}

// squeueFormat puts the reason last: it is the only field that may hold spaces.
const squeueFormat = "%i|%T|%N|%j|%r"

func parseJobs(out []byte) []job {
	var jobs []job
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "|", 5)
		if len(f) != 5 {
			continue
		}
		jobs = append(jobs, job{ID: f[0], State: f[1], Node: f[2], Name: f[3], Reason: f[4]})
	}
	return jobs
}

// jobs lists every job slurmctld still knows, finished ones included (for
// MinJobAge after they end), in one call.
func (c *cli) jobs(ctx context.Context) ([]job, error) {
	out, err := c.run(ctx, "squeue", "--noheader", "--states=all", "--format="+squeueFormat)
	if err != nil {
		return nil, err
	}
	return parseJobs(out), nil
}

// jobByID asks about one job. A job slurmctld no longer knows (purged after
// MinJobAge, or never there) is errdefs.NotFound: only that answer, not its
// absence from a listing, says a job is gone.
func (c *cli) jobByID(ctx context.Context, id string) (job, error) {
	out, err := c.run(ctx, "squeue", "--noheader", "--states=all", "--jobs="+id, "--format="+squeueFormat)
	if err != nil {
		return job{}, notFoundIfInvalid(err)
	}
	for _, j := range parseJobs(out) {
		if j.ID == id {
			return j, nil
		}
	}
	return job{}, errdefs.NotFound("squeue --jobs=%s: no such job", id)
}

// jobsNamed lists the jobs of that name.
func (c *cli) jobsNamed(ctx context.Context, name string) ([]job, error) {
	out, err := c.run(ctx, "squeue", "--noheader", "--states=all", "--name="+name, "--format="+squeueFormat)
	if err != nil {
		return nil, err
	}
	return parseJobs(out), nil
}

// stop asks the job to stop: a job still pending leaves the queue; a running
// one's batch script gets SIGTERM, and only the script, which stops the
// containers (scriptFunctions' stop). A signal to every process of the job
// (--full, or a plain scancel) would also kill the podman commands in flight: a
// container that a killed podman start had started runs on, unknown to podman,
// after the job has ended. And a plain scancel SIGKILLs the script after
// KillWait, whether or not it has stopped the containers.
func (c *cli) stop(ctx context.Context, id string) error {
	// Only while pending: a job that has started meanwhile is left running.
	if _, err := c.run(ctx, "scancel", "--state=PENDING", id); err != nil {
		return notFoundIfInvalid(err)
	}
	_, err := c.run(ctx, "scancel", "--batch", "--signal=TERM", id)
	if err != nil && strings.Contains(err.Error(), "already completing or completed") {
		return nil // ending already
	}
	return notFoundIfInvalid(err)
}

func notFoundIfInvalid(err error) error {
	if err != nil && strings.Contains(err.Error(), "Invalid job id") {
		return errdefs.AsNotFound(err)
	}
	return err
}

// ping asks slurmctld whether it is up.
func (c *cli) ping(ctx context.Context) error {
	out, err := c.run(ctx, "scontrol", "ping")
	if err != nil {
		return errdefs.AsUnavailable(err)
	}
	if !strings.Contains(string(out), "is UP") {
		return errdefs.Unavailable("slurmctld: %s", strings.TrimSpace(string(out)))
	}
	return nil
}

// slurmNode is one line of sinfo: a compute node and what it has.
type slurmNode struct {
	Name      string
	CPUs      int64
	MemoryMiB int64
	GPUs      int64
	State     string
}

// nodes lists the compute nodes of the partition (every node when empty).
func (c *cli) nodes(ctx context.Context, partition string) ([]slurmNode, error) {
	args := []string{"--noheader", "--Node", "--format=%N|%c|%m|%G|%T"}
	if partition != "" {
		args = append(args, "--partition="+partition)
	}
	out, err := c.run(ctx, "sinfo", args...)
	if err != nil {
		return nil, err
	}
	return parseNodes(out), nil
}

func parseNodes(out []byte) []slurmNode {
	seen := map[string]bool{} // sinfo --Node prints a node once per partition
	var nodes []slurmNode
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 5 || seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		n := slurmNode{Name: f[0], State: f[4], GPUs: gpusIn(f[3])}
		n.CPUs, _ = strconv.ParseInt(strings.TrimSuffix(f[1], "+"), 10, 64)
		n.MemoryMiB, _ = strconv.ParseInt(strings.TrimSuffix(f[2], "+"), 10, 64)
		nodes = append(nodes, n)
	}
	return nodes
}

// gpusIn counts the GPUs of a gres string such as "gpu:2", "gpu:a100:4(S:0-1)" or
// "gpu:1,mps:100".
func gpusIn(gres string) int64 {
	var total int64
	for _, g := range strings.Split(gres, ",") {
		g, _, _ = strings.Cut(g, "(")
		parts := strings.Split(g, ":")
		if parts[0] != "gpu" || len(parts) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err == nil {
			total += n
		}
	}
	return total
}

// capacityOf is the node's capacity for the partition's compute nodes: their
// CPUs, memory and GPUs summed, and maxPods pods.
func capacityOf(nodes []slurmNode, maxPods int) corev1.ResourceList {
	var cpus, mib, gpus int64
	for _, n := range nodes {
		cpus, mib, gpus = cpus+n.CPUs, mib+n.MemoryMiB, gpus+n.GPUs
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(cpus, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mib<<20, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
	if gpus > 0 {
		rl[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return rl
}
