package slurm

import (
	"context"
	"os"
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
			if err := p.cli.cancel(ctx, id); err != nil && !errdefs.IsNotFound(err) {
				p.log.Warn("cancelling the job of a deleted pod", "pod", providerutil.PodKey(rec.pod.Namespace, rec.pod.Name), "job", id, "error", err)
			}
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
