package slurm

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// NotifyPods polls the jobs' states (one squeue for all) every PollInterval and
// passes on the pods whose status changed.
func (p *Provider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	providerutil.PollEvery(ctx, p.cfg.PollInterval.Duration, p.log, "polling Slurm for the jobs' states",
		func(ctx context.Context) error { return p.poll(ctx, notify) })
}

// poll computes every pod's status from squeue and the files its job wrote,
// cancels the jobs of deleted pods whose grace period is over, and forgets the
// deleted pods whose job has ended.
func (p *Provider) poll(ctx context.Context, notify func(*corev1.Pod)) error {
	p.mu.Lock()
	recs := make([]*record, 0, len(p.pods))
	for _, rec := range p.pods {
		recs = append(recs, rec)
	}
	p.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	jobs, err := p.cli.jobs(ctx)
	if err != nil {
		return err
	}
	byID := make(map[string]job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	now := time.Now()
	for _, rec := range recs {
		p.mu.Lock()
		id, deleting, killAt, purged := rec.jobID, rec.deleting, rec.killAt, rec.purged
		final := rec.status != nil && (rec.status.Phase == corev1.PodSucceeded || rec.status.Phase == corev1.PodFailed)
		p.mu.Unlock()
		if final && !deleting {
			continue // a terminal phase does not change: no need to read its files again
		}
		j, known := byID[id]
		if id != "" && !known && !purged {
			switch jj, err := p.cli.jobByID(ctx, id); {
			case err == nil:
				p.log.Info("a job missing from the listing is known to Slurm", "job", id, "state", jj.State)
				j, known = jj, true
			case errdefs.IsNotFound(err):
				p.log.Info("job no longer known to Slurm", "pod", providerutil.PodKey(rec.pod.Namespace, rec.pod.Name), "job", id)
				p.mu.Lock()
				rec.purged = true
				p.mu.Unlock()
			default:
				p.log.Warn("asking Slurm about a job", "job", id, "error", err)
				continue // unknown, not gone: ask again at the next poll
			}
		}
		view := jobView{ID: id, Known: known, job: j}
		instances := map[string][]instance{}
		for _, c := range containers(rec.pod) {
			instances[c.Name] = readInstances(rec.dir, c.Name)
		}
		st := podStatus(rec.pod, view, instances, rec.accepted)
		ended := id != "" && (!known || terminalStates[j.State])
		if deleting && id != "" && !ended && now.After(killAt) {
			p.stopNow(ctx, rec)
		}
		p.mu.Lock()
		changed := rec.status == nil || !reflect.DeepEqual(rec.status, st)
		if changed {
			rec.status = st
		}
		var out *corev1.Pod
		if changed {
			out = podOf(rec)
		}
		done := ended || (id == "" && !rec.creating)
		forget := deleting && done && rec.gone
		if deleting && done {
			rec.gone = true // forgotten at the next poll, once its final status is out
		}
		if forget {
			delete(p.pods, providerutil.PodKey(rec.pod.Namespace, rec.pod.Name))
		}
		p.mu.Unlock()
		if out != nil {
			notify(out)
		}
		if forget {
			if err := os.RemoveAll(rec.dir); err != nil {
				p.log.Warn("removing a deleted pod's directory", "dir", rec.dir, "error", err)
			}
		}
	}
	return nil
}

// stopAgain is how long after telling a deleted pod's script to stop its
// containers at once the provider tells it again while the job lasts: a signal
// may go astray (a job just starting, its traps not yet set).
const stopAgain = 10 * time.Second

// stopNow tells the script of a deleted pod whose grace period is over (and
// 5 s more) to kill its containers at once: its stopping file then says 0 s.
// The job is not cancelled outright: Slurm's SIGKILL after KillWait would end
// the script and podman, not the containers, and the job would end while they
// run on. A job that will not end keeps the pod Terminating, as a kubelet keeps
// a pod whose containers its runtime cannot stop.
func (p *Provider) stopNow(ctx context.Context, rec *record) {
	p.mu.Lock()
	id, dir := rec.jobID, rec.dir
	rec.killAt = time.Now().Add(stopAgain)
	p.mu.Unlock()
	key := providerutil.PodKey(rec.pod.Namespace, rec.pod.Name)
	if err := writeFile(filepath.Join(dir, stoppingFile), []byte("0"), 0o644); err != nil {
		p.log.Warn("telling the job of a deleted pod to stop at once", "pod", key, "job", id, "error", err)
	}
	if err := p.cli.stop(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		p.log.Warn("stopping the job of a deleted pod", "pod", key, "job", id, "error", err)
	}
}
