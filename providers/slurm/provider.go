package slurm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// Provider runs pods as Slurm jobs.
type Provider struct {
	cfg  Config
	node string
	cli  *cli
	log  *slog.Logger

	mu   sync.Mutex
	pods map[string]*record // by namespace/name

	capMu    sync.Mutex
	capacity corev1.ResourceList // from sinfo; nil until read
}

// record is a pod the provider has accepted.
type record struct {
	pod      *corev1.Pod
	dir      string
	accepted time.Time
	jobID    string // "" until sbatch answered
	status   *corev1.PodStatus
	deleting bool
	killAt   time.Time // when a deleted pod's job is cancelled outright
	gone     bool      // its job has ended after a deletion: forgotten at the next poll
	purged   bool      // Slurm said it no longer knows the job
	creating bool      // a CreateResolvedPod is submitting it
}

// saved is a pod's pod.json: what a restarted provider needs besides the job ID.
type saved struct {
	Pod      *corev1.Pod `json:"pod"`
	Accepted time.Time   `json:"accepted"`
}

const (
	podFile   = "pod.json"
	jobIDFile = "jobid"
)

// New returns the provider with the pods found under cfg.JobRoot, so that a
// restarted vkubelet goes on with the jobs it submitted.
func New(cfg Config, nodeName string, log *slog.Logger) (*Provider, error) {
	if err := cfg.complete(); err != nil {
		return nil, fmt.Errorf("slurm provider: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{cfg: cfg, node: nodeName, cli: newCLI(cfg), log: log.With("provider", "slurm"), pods: map[string]*record{}}
	if err := os.MkdirAll(cfg.JobRoot, 0o711); err != nil {
		return nil, fmt.Errorf("slurm provider: job root: %w", err)
	}
	entries, err := os.ReadDir(cfg.JobRoot)
	if err != nil {
		return nil, fmt.Errorf("slurm provider: job root: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(cfg.JobRoot, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, podFile))
		if err != nil {
			continue // not a pod's directory, or one removed half-way
		}
		var s saved
		if err := json.Unmarshal(b, &s); err != nil || s.Pod == nil {
			p.log.Warn("ignoring a pod directory that cannot be read", "dir", dir, "error", err)
			continue
		}
		rec := &record{pod: s.Pod, dir: dir, accepted: s.Accepted}
		id, err := os.ReadFile(filepath.Join(dir, jobIDFile))
		if err != nil {
			// Stopped between writing the directory and learning the job's ID: left
			// out, so that the controller creates the pod again, and that creation
			// finds the job by name if sbatch had taken it.
			continue
		}
		rec.jobID = strings.TrimSpace(string(id))
		if _, err := os.Stat(filepath.Join(dir, stoppingFile)); err == nil {
			rec.deleting, rec.killAt = true, time.Now()
		}
		p.pods[providerutil.PodKey(s.Pod.Namespace, s.Pod.Name)] = rec
	}
	if len(p.pods) > 0 {
		p.log.Info("found the pods of an earlier run", "pods", len(p.pods))
	}
	return p, nil
}

// CreateResolvedPod writes the pod's directory and submits its job, unless a job
// of that name exists already (submitted before a crash, say).
func (p *Provider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	pod := rp.Pod
	k := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	rec := p.pods[k]
	p.mu.Unlock()
	if rec != nil && rec.pod.UID == pod.UID {
		if rec.jobID != "" {
			return nil
		}
	} else if rec != nil {
		return fmt.Errorf("slurm: pod %s: the job of an earlier pod of that name (UID %s) is still being deleted", k, rec.pod.UID)
	} else {
		rec = &record{pod: pod.DeepCopy(), dir: podDir(p.cfg.JobRoot, pod), accepted: time.Now()}
	}
	// The directory is written before anything is submitted: without one, no job
	// of this pod can exist, and the lookup by name is saved.
	_, statErr := os.Stat(filepath.Join(rec.dir, podFile))
	submittedBefore := statErr == nil
	flags, err := prepare(rp, p.cfg, rec)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.pods[k] = rec
	rec.creating = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		rec.creating = false
		p.mu.Unlock()
	}()

	id := ""
	if submittedBefore {
		existing, err := p.cli.jobsNamed(ctx, string(pod.UID))
		if err != nil {
			return fmt.Errorf("slurm: pod %s: looking for its job: %w", k, err)
		}
		if len(existing) > 0 {
			id = existing[0].ID
			p.log.Info("found the pod's job, not submitting it again", "pod", k, "job", id)
		}
	}
	if id == "" {
		if id, err = p.cli.submit(ctx, filepath.Join(rec.dir, scriptFile), flags); err != nil {
			return fmt.Errorf("slurm: pod %s: %w", k, err)
		}
	}
	if err := writeFile(filepath.Join(rec.dir, jobIDFile), []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("slurm: pod %s: %w", k, err)
	}
	p.mu.Lock()
	rec.jobID = id
	deleted := rec.deleting
	p.mu.Unlock()
	p.log.Debug("submitted", "pod", k, "job", id)
	if deleted {
		// Deleted while it was being submitted: DeletePod had no job to stop.
		if err := p.cli.stop(ctx, id); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("slurm: pod %s deleted while submitted: %w", k, err)
		}
	}
	return nil
}

// prepare writes the pod's directory and returns sbatch's options for its job.
func prepare(rp *provider.ResolvedPod, cfg Config, rec *record) ([]string, error) {
	k := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	script, err := jobScript(rp, scriptOptions{dir: rec.dir, podman: cfg.Podman, insecure: cfg.InsecureRegistries, createFlags: cfg.CreateFlags})
	if err != nil {
		return nil, errdefs.InvalidInput("slurm: pod %s: %v", k, err)
	}
	flags, err := submitFlags(rp.Pod, cfg, rec.dir)
	if err != nil {
		return nil, errdefs.InvalidInput("slurm: pod %s: %v", k, err)
	}
	if err := writePodDir(rp, rec, script); err != nil {
		return nil, fmt.Errorf("slurm: pod %s: %w", k, err)
	}
	return flags, nil
}

// Job is a pod's job as the provider would submit it.
type Job struct {
	Dir    string   // the pod's directory, its script and volumes written
	Script string   // the batch script's path
	Flags  []string // sbatch's options
}

// PrepareJob writes a pod's directory under cfg.JobRoot as the provider does
// before it submits the pod's job, and returns what to give sbatch: for tools
// that measure the same jobs without vkubelet (vkubeletctl bench --provider slurm).
func PrepareJob(rp *provider.ResolvedPod, cfg Config) (Job, error) {
	if err := cfg.complete(); err != nil {
		return Job{}, err
	}
	rec := &record{pod: rp.Pod, dir: podDir(cfg.JobRoot, rp.Pod), accepted: time.Now()}
	flags, err := prepare(rp, cfg, rec)
	if err != nil {
		return Job{}, err
	}
	return Job{Dir: rec.dir, Script: filepath.Join(rec.dir, scriptFile), Flags: flags}, nil
}

// CreatePod submits a pod without resolved data (not called by the controller,
// which resolves pods for this provider).
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// writePodDir writes the pod's directory: volumes, registry credentials, script
// and pod.json, the last so that a half-written directory is not taken for a pod.
func writePodDir(rp *provider.ResolvedPod, rec *record, script string) error {
	if err := os.MkdirAll(filepath.Join(rec.dir, containerDir), 0o700); err != nil {
		return err
	}
	if err := writeVolumes(rec.dir, rp); err != nil {
		return err
	}
	if len(rp.PullCredentials) > 0 {
		auths := map[string]map[string]string{}
		for _, c := range rp.PullCredentials {
			auth := c.Auth
			if auth == "" && c.Username != "" {
				auth = base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
			}
			host := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(c.Registry, "https://"), "http://"), "/")
			auths[host] = map[string]string{"auth": auth}
		}
		b, _ := json.Marshal(map[string]any{"auths": auths})
		if err := writeFile(filepath.Join(rec.dir, "auth.json"), b, 0o600); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(rec.dir, scriptFile), []byte(script), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(saved{Pod: rec.pod, Accepted: rec.accepted})
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(rec.dir, podFile), b, 0o600)
}

// writeVolumes materializes the pod's volumes under dir/volumes: the resolved
// files of ConfigMap, Secret, projected and downwardAPI volumes, and an empty,
// world-writable directory for each emptyDir (containers may run as any user).
func writeVolumes(dir string, rp *provider.ResolvedPod) error {
	for _, v := range rp.Pod.Spec.Volumes {
		if v.HostPath != nil {
			continue
		}
		vdir := filepath.Join(dir, volumesDir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		if v.EmptyDir != nil {
			if err := os.Chmod(vdir, 0o777); err != nil {
				return err
			}
		}
	}
	for name, contents := range rp.Volumes {
		for _, f := range contents.Files {
			path := filepath.Join(dir, volumesDir, name, filepath.Clean("/"+f.Path))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if f.Mode != 0 {
				mode = os.FileMode(f.Mode) & 0o777
			}
			if err := writeFile(path, f.Data, mode); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFile replaces path atomically: a container never reads half a file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // whatever the umask
		return err
	}
	return os.Rename(tmp, path)
}

// UpdatePodVolumes rewrites the pod's volume files in place: the containers see
// them change through their bind mounts, as with the kubelet.
func (p *Provider) UpdatePodVolumes(_ context.Context, rp *provider.ResolvedPod) error {
	p.mu.Lock()
	rec := p.pods[providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)]
	p.mu.Unlock()
	if rec == nil || rec.pod.UID != rp.Pod.UID {
		return providerutil.PodNotFound("slurm", rp.Pod.Namespace, rp.Pod.Name)
	}
	return writeVolumes(rec.dir, rp)
}

// UpdatePod: a submitted job keeps its script; labels and annotations are kept
// for GetPod. A resize is refused: a job's allocation is fixed when it is
// submitted.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec := p.pods[providerutil.PodKey(pod.Namespace, pod.Name)]; rec != nil && rec.pod.UID == pod.UID {
		if err := providerutil.RefuseResize("slurm", rec.pod, pod); err != nil {
			return err
		}
		rec.pod.Labels, rec.pod.Annotations = pod.Labels, pod.Annotations
	}
	return nil
}

// UpdateResolvedPod: as UpdatePod.
func (p *Provider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return p.UpdatePod(ctx, rp.Pod)
}

// DeletePod stops the pod's job: a pending job leaves the queue at once; a
// running one's script gets SIGTERM, upon which it stops the containers within
// the grace period, and is told again to stop them, at once, once that period
// is over (poll). The job ends once they have stopped: the pod's stop is
// confirmed only then.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	k := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	rec := p.pods[k]
	if rec == nil {
		p.mu.Unlock()
		return providerutil.PodNotFound("slurm", pod.Namespace, pod.Name)
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	first := !rec.deleting
	if first {
		rec.deleting, rec.killAt = true, time.Now().Add(time.Duration(grace)*time.Second+5*time.Second)
	}
	id, dir := rec.jobID, rec.dir
	p.mu.Unlock()
	if !first {
		return nil
	}
	// The script reads the grace period from the file, and no container restarts
	// once it exists, even if the signal were lost.
	if err := writeFile(filepath.Join(dir, stoppingFile), []byte(strconv.FormatInt(grace, 10)), 0o644); err != nil {
		return fmt.Errorf("slurm: pod %s: %w", k, err)
	}
	if id == "" {
		return nil // a creation in flight stops the job it submits
	}
	if err := p.cli.stop(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		p.mu.Lock()
		rec.deleting = false // try again
		p.mu.Unlock()
		return fmt.Errorf("slurm: pod %s: %w", k, err)
	}
	return nil
}

func (p *Provider) lookup(namespace, name string) (*record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.pods[providerutil.PodKey(namespace, name)]
	if rec == nil {
		return nil, providerutil.PodNotFound("slurm", namespace, name)
	}
	return rec, nil
}

// podOf returns a copy of the record's pod with its last status; p.mu is held.
func podOf(rec *record) *corev1.Pod {
	pod := rec.pod.DeepCopy()
	if rec.status != nil {
		pod.Status = *rec.status.DeepCopy()
	} else {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	return pod
}

// GetPod returns the pod with its last status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.pods[providerutil.PodKey(namespace, name)]
	if rec == nil {
		return nil, providerutil.PodNotFound("slurm", namespace, name)
	}
	return podOf(rec), nil
}

// GetPodStatus returns the pod's last status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every pod the provider has.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, rec := range p.pods {
		out = append(out, podOf(rec))
	}
	return out, nil
}
