package slurmenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// startEnv starts a cluster for one test and stops it at the end; when the test has
// failed, it logs the daemons' logs first (SLURMENV_KEEP=1 keeps the whole Dir).
func startEnv(t *testing.T, opts Options) *Env {
	t.Helper()
	testenv.Require(t, Available())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	env, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster %s up in %v (%d CPUs, %d MiB, %d GPUs) in %s", env.NodeName, time.Since(start).Round(time.Millisecond), env.CPUs, env.MemoryMiB, env.GPUs, env.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			for _, log := range []string{"slurmctld.log", "slurmd.log", "munged.out"} {
				b, _ := os.ReadFile(filepath.Join(env.Dir, log))
				t.Logf("%s:\n%s", log, b)
			}
		}
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// run runs a client command against env and returns its trimmed output.
func run(t *testing.T, env *Env, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitUntil polls cond every 100ms until it holds, naming what in the failure once
// timeout has passed.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.True(t, timeout, func() (bool, string) {
		ok, state := cond()
		return ok, what + ": still " + state
	})
}

// jobState is the job's state as scontrol reports it, e.g. RUNNING or COMPLETED.
func jobState(t *testing.T, env *Env, id string) string {
	return field(run(t, env, "scontrol", "--oneliner", "show", "job", id), "JobState")
}

func waitCompleted(t *testing.T, env *Env, id string) {
	t.Helper()
	waitUntil(t, time.Minute, "job "+id+" completes", func() (bool, string) {
		s := jobState(t, env, id)
		switch s {
		case "COMPLETED":
			return true, s
		case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING":
			return false, s
		}
		t.Fatalf("job %s ended %s", id, s)
		return false, s
	})
}

func TestSlurmRunsABatchJobWithAGPU(t *testing.T) {
	t.Parallel()
	env := startEnv(t, Options{GPUs: 2})

	out := filepath.Join(env.Dir, "job1.out")
	id := run(t, env, "sbatch", "--parsable", "--gres=gpu:1", "-o", out, "--wrap", "echo hi; echo $CUDA_VISIBLE_DEVICES")
	waitCompleted(t, env, id)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "hi\n0\n"; got != want {
		t.Errorf("job output = %q, want %q", got, want)
	}
}

func TestJobsOutliveTheControllerGoingDown(t *testing.T) {
	t.Parallel()
	env := startEnv(t, Options{GPUs: 2})

	// A job that is running when the controller stops and ends while it is down.
	release := filepath.Join(env.Dir, "release")
	id := run(t, env, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "while [ ! -e "+release+" ]; do sleep 0.1; done")
	waitUntil(t, 30*time.Second, "job "+id+" runs", func() (bool, string) {
		s := jobState(t, env, id)
		return s == "RUNNING", s
	})
	if err := env.StopController(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := env.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller back in %v", time.Since(start).Round(time.Millisecond))

	waitCompleted(t, env, id)
	if got := run(t, env, "squeue", "--noheader", "--states=all", "--format=%i %T"); got != id+" COMPLETED" {
		t.Errorf("squeue after restart = %q, want %q", got, id+" COMPLETED")
	}
	out := filepath.Join(env.Dir, "job2.out")
	id2 := run(t, env, "sbatch", "--parsable", "--gres=gpu:2", "-o", out, "--wrap", "echo $CUDA_VISIBLE_DEVICES")
	waitCompleted(t, env, id2)
	if b, _ := os.ReadFile(out); string(b) != "0,1\n" {
		t.Errorf("second job output = %q, want %q", b, "0,1\n")
	}
}

func TestSmallJobsRunSideBySide(t *testing.T) {
	t.Parallel()
	env := startEnv(t, Options{})

	// More jobs than the machine has CPUs. Each says when its script has started.
	n := max(6, env.CPUs+1)
	started := filepath.Join(env.Dir, "started")
	if err := os.Mkdir(started, 0o755); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = run(t, env, "sbatch", "--parsable", "--cpus-per-task=1", "--mem=16", "-o", "/dev/null",
			"--wrap", "touch "+started+"/$SLURM_JOB_ID; sleep 30")
	}
	list := strings.Join(ids, ",")
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d jobs run at once", n), func() (bool, string) {
		got := run(t, env, "squeue", "--noheader", "--jobs="+list, "--format=%T")
		return strings.Count(got, "RUNNING") == n, strings.Join(strings.Fields(got), " ")
	})
	// Slurm's SIGTERM can miss a job cancelled while it is being launched, which then
	// lingers until the SIGKILL KillWait (30s) later.
	waitUntil(t, 30*time.Second, "job scripts start", func() (bool, string) {
		entries, _ := os.ReadDir(started)
		return len(entries) == n, fmt.Sprintf("%d of %d started", len(entries), n)
	})

	run(t, env, "scancel", ids...)
	waitUntil(t, 30*time.Second, "jobs cancelled", func() (bool, string) {
		got := run(t, env, "squeue", "--noheader", "--states=all", "--jobs="+list, "--format=%T")
		return strings.Count(got, "CANCELLED") == n, strings.Join(strings.Fields(got), " ")
	})
}

func TestEnvironPointsTheCommandsAtTheCluster(t *testing.T) {
	t.Setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
	t.Setenv("SLURM_JOB_ID", "7")
	t.Setenv("SQUEUE_FORMAT", "%i")
	t.Setenv("SLURMENV_TEST_KEEP", "yes")
	env := &Env{Conf: "/tmp/x/slurm.conf"}

	got := map[string]string{}
	for _, kv := range env.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s appears twice", k)
		}
		got[k] = v
	}
	for k, want := range map[string]string{"SLURM_CONF": "/tmp/x/slurm.conf", "SLURM_JOB_ID": "", "SQUEUE_FORMAT": "", "SLURMENV_TEST_KEEP": "yes"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}
