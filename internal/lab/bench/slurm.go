package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/slurmenv"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// SlurmResult holds the figures of `vkubeletctl bench --provider slurm`: the same
// jobs submitted by sbatch directly and run as pods through a node with the
// Slurm provider, on one private Slurm, in one run.
type SlurmResult struct {
	Pods int `json:"pods"`
	// Sbatch is the raw path: each pod's job script, written as the provider
	// writes it, submitted by sbatch; "Running" is when its container started.
	Sbatch PathFigures `json:"sbatch"`
	// Vkubelet is the pod created in the API until it is seen Running there.
	Vkubelet PathFigures `json:"vkubelet"`
	// Overhead is vkubelet's time to start every pod over sbatch's, less one.
	Overhead float64 `json:"overhead"`
}

// PathFigures are one path's throughput and latency: a raw back end's (sbatch,
// the CRI) or the same pods' through a node.
type PathFigures struct {
	PodsPerS float64 `json:"pods_per_s"`
	Seconds  float64 `json:"seconds"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
}

// RunSlurm starts a private Slurm and the test registry, then measures the raw
// path and the node (the vkubelet binary, --provider slurm, a child process) with
// cfg.Pods pods of cfg.Shape running `sleep`, one after the other.
func RunSlurm(ctx context.Context, cfg Config) (*SlurmResult, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 20
	}
	cfg.Rate = 0
	reg, err := crienv.StartRegistry()
	if err != nil {
		return nil, err
	}
	defer reg.Stop()
	env, err := slurmenv.Start(ctx, slurmenv.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	pcfg, err := env.ProviderConfig(reg.Registry)
	if err != nil {
		return nil, err
	}
	// Both paths find the image present: the pull is not what is measured.
	pull := exec.CommandContext(ctx, pcfg.Podman[0], append(pcfg.Podman[1:], "pull", "-q", "--tls-verify=false", reg.Busybox)...)
	if out, err := pull.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pulling %s: %v: %s", reg.Busybox, err, out)
	}
	c, err := loadClient(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	res := &SlurmResult{Pods: cfg.Pods}
	ns := namespaceName("slurm")
	tmpl, err := prepareNamespace(ctx, c, ns, cfg.Shape, caBundle(cfg.RESTConfig))
	if err != nil {
		return nil, err
	}
	tmpl.image, tmpl.command = reg.Busybox, []string{"sleep", "3600"}

	fmt.Fprintf(cfg.Log, "bench: %d jobs by sbatch\n", cfg.Pods)
	if res.Sbatch, err = measureSbatch(ctx, cfg, env, pcfg, tmpl); err != nil {
		return nil, fmt.Errorf("sbatch: %w", err)
	}
	if err := drain(ctx, env, pcfg); err != nil {
		return nil, err
	}

	fmt.Fprintf(cfg.Log, "bench: %d pods through vkubelet --provider slurm\n", cfg.Pods)
	pcfg.JobRoot = filepath.Join(env.Dir, "pods")
	b, err := json.Marshal(pcfg)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(env.Dir, "provider.json")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return nil, err
	}
	const name = "bench-slurm-node"
	n, err := startAgentWith(ctx, cfg, "vkubelet-slurm", name, []string{"--provider", "slurm", "--provider-config", conf})
	if err != nil {
		return nil, err
	}
	defer n.stop()
	if err := waitNodeReady(ctx, c, name, false); err != nil {
		return nil, n.failed(err)
	}
	o := observe(c, ns)
	defer close(o.stop)
	lat, span, err := startPods(ctx, c, o, cfg, tmpl, ns, []string{name})
	if err != nil {
		return nil, n.failed(err)
	}
	res.Vkubelet = figures(cfg.Pods, lat, span)
	if _, _, err := deletePods(ctx, c, o, cfg, tmpl, ns); err != nil {
		return nil, n.failed(err)
	}
	if res.Sbatch.Seconds > 0 {
		res.Overhead = res.Vkubelet.Seconds/res.Sbatch.Seconds - 1
	}
	return res, nil
}

func figures(pods int, lat []time.Duration, span time.Duration) PathFigures {
	f := PathFigures{Seconds: span.Seconds(), P50ms: percentile(lat, 50), P99ms: percentile(lat, 99)}
	if span > 0 {
		f.PodsPerS = float64(pods) / span.Seconds()
	}
	return f
}

// measureSbatch submits each pod's job with sbatch, as the provider would, and
// waits until every job's container has started.
func measureSbatch(ctx context.Context, cfg Config, env *slurmenv.Env, pcfg slurm.Config, tmpl *podTemplate) (PathFigures, error) {
	pcfg.JobRoot = filepath.Join(env.Dir, "raw")
	var mu sync.Mutex
	asked := map[string]time.Time{}
	started := map[string]string{} // pod name → its container's started file
	err := forEach(ctx, cfg, cfg.Pods, func(i int) error {
		name := tmpl.name(i)
		pod := tmpl.pod(name, "")
		pod.Namespace, pod.UID = "raw", uuid.NewUUID()
		ctr := pod.Spec.Containers[0]
		job, err := slurm.PrepareJob(&provider.ResolvedPod{Pod: pod, Env: map[string][]corev1.EnvVar{ctr.Name: ctr.Env}}, pcfg)
		if err != nil {
			return err
		}
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "sbatch", append(append([]string{"--parsable"}, job.Flags...), job.Script)...)
		cmd.Env = env.Environ()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("sbatch: %v: %s", err, strings.TrimSpace(string(out)))
		}
		mu.Lock()
		asked[name], started[name] = t0, filepath.Join(job.Dir, "c", ctr.Name, "0", "started")
		mu.Unlock()
		return nil
	})
	if err != nil {
		return PathFigures{}, err
	}
	seen := map[string]time.Time{}
	deadline := time.Now().Add(podTimeout(cfg.Pods))
	for len(seen) < len(started) {
		for name, file := range started {
			if _, ok := seen[name]; !ok {
				if _, err := os.Stat(file); err == nil {
					seen[name] = time.Now()
				}
			}
		}
		if time.Now().After(deadline) {
			return PathFigures{}, fmt.Errorf("%d of %d jobs' containers started within %s", len(seen), len(started), podTimeout(cfg.Pods))
		}
		select {
		case <-ctx.Done():
			return PathFigures{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	var first, last time.Time
	lat := make([]time.Duration, 0, len(seen))
	for name, at := range seen {
		lat = append(lat, at.Sub(asked[name]))
		if first.IsZero() || asked[name].Before(first) {
			first = asked[name]
		}
		if at.After(last) {
			last = at
		}
	}
	return figures(cfg.Pods, lat, last.Sub(first)), nil
}

// drain cancels every job, waits until none is left, and removes the containers
// whose job's end came before their script's own cleanup (a SIGKILL after
// Slurm's KillWait, under the load of stopping every container at once): the
// next measurement starts on an idle node.
func drain(ctx context.Context, env *slurmenv.Env, pcfg slurm.Config) error {
	run := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = env.Environ()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("scancel", "--partition="+env.Partition); err != nil {
		return fmt.Errorf("scancel: %v: %s", err, out)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		jobs, err := run("squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", "--format=%i")
		if err == nil && strings.TrimSpace(jobs) == "" {
			if out, err := run(pcfg.Podman[0], append(pcfg.Podman[1:], "rm", "--force", "--all", "--time=0")...); err != nil {
				return fmt.Errorf("podman rm: %v: %s", err, out)
			}
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("jobs still there 3 minutes after scancel")
}

// MedianSlurm is the median of each figure over several runs.
func MedianSlurm(runs []*SlurmResult) *SlurmResult {
	pick := func(get func(*SlurmResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	out := &SlurmResult{Pods: runs[0].Pods}
	out.Sbatch = medianFigures(len(runs), func(i int) PathFigures { return runs[i].Sbatch })
	out.Vkubelet = medianFigures(len(runs), func(i int) PathFigures { return runs[i].Vkubelet })
	out.Overhead = pick(func(r *SlurmResult) float64 { return r.Overhead })
	return out
}
