package cri

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the pod's goroutine: one per pod, which makes the runtime match
// the pod (sandbox.go, containers.go, stop.go) and publishes its status
// (status.go) every SyncInterval or when woken, until the pod is gone.

func (p *Provider) startWorker(rec *podRecord) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.runPod(rec)
	}()
}

// runPod is the pod's goroutine: it syncs the pod every SyncInterval, or sooner when
// woken, until the pod is deleted or the provider closed.
func (p *Provider) runPod(rec *podRecord) {
	ticker := time.NewTicker(p.cfg.SyncInterval.Duration)
	defer ticker.Stop()
	for {
		if done := p.syncPod(p.ctx, rec); done {
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-rec.wake:
		case <-ticker.C:
		}
	}
}

// syncPod makes the runtime match the pod once and publishes its status. It returns
// true when the pod is gone.
func (p *Provider) syncPod(ctx context.Context, rec *podRecord) bool {
	p.mu.Lock()
	pod, env, creds, vols := rec.pod, rec.env, rec.creds, rec.volumes
	dirty, deleting, deleteBy := rec.volumesDirty, rec.deleting, rec.deleteBy
	rec.volumesDirty = false
	p.mu.Unlock()
	if deleting {
		return p.killPod(ctx, rec, deleteBy)
	}
	if dirty || !rec.volumesWritten {
		if err := p.writeVolumes(pod, vols); err != nil {
			p.log.Error("writing volumes", "pod", rec.key, "err", err)
		} else {
			rec.volumesWritten = true
		}
	}
	if rec.sandboxID == "" {
		if !p.runSandbox(ctx, rec, pod) {
			p.publish(rec, computeStatus(rec, pod, p.hostIPNow()))
			return false
		}
	}
	if err := p.refresh(ctx, rec, pod); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("reading pod state from the runtime", "pod", rec.key, "err", err)
		}
		return false
	}
	if !rec.terminal && !rec.sandboxReady {
		// The sandbox died under the pod (its processes were killed, the machine
		// restarted): make a new one, as the kubelet does.
		// The old sandbox is stopped but kept with its containers: their
		// instances stay the containers' previous ones (restart counts, last
		// states, `logs --previous`) until newer ones replace them (refresh).
		// The ephemeral containers keep how they ended, as they never run twice.
		sctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		if _, err := p.runtime.StopPodSandbox(sctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: rec.sandboxID}); err != nil {
			p.log.Warn("stopping a dead sandbox", "pod", rec.key, "sandbox", rec.sandboxID, "err", err)
		}
		cancel()
		endEphemeral(rec, pod, time.Now())
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever && ranAny(rec, pod) {
			// The kubelet makes no new sandbox for a pod that may not restart
			// the containers that ran: it ends, with how they ended.
			p.log.Warn("sandbox not ready; restartPolicy Never: the pod ends", "pod", rec.key, "sandbox", rec.sandboxID)
			rec.terminal, rec.sandboxStopped = true, true
			p.publish(rec, computeStatus(rec, pod, p.hostIPNow()))
			return false
		}
		p.log.Warn("sandbox not ready, re-creating it", "pod", rec.key, "sandbox", rec.sandboxID)
		rec.oldSandboxes = append(rec.oldSandboxes, rec.sandboxID)
		rec.sandboxAttempt++
		rec.sandboxCfg = nil
		p.mu.Lock()
		rec.sandboxID = ""
		p.mu.Unlock()
		rec.wakeUp()
		return false
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil && !rec.terminal && time.Since(rec.accepted) > time.Duration(*d)*time.Second {
		p.log.Info("pod passed its active deadline, stopping it", "pod", rec.key)
		p.stopAll(ctx, rec, pod, time.Now().Add(provider.GracePeriod(pod)))
		rec.terminal, rec.deadlineExceeded = true, true
		if err := p.refresh(ctx, rec, pod); err != nil {
			return false
		}
	}
	if !rec.terminal {
		if trigger := restartAllTrigger(rec, pod); trigger != "" {
			if !p.restartAll(ctx, rec, pod, trigger) {
				// Nothing starts, the trigger least of all, before every
				// container has stopped: the next sync tries again.
				return false
			}
			if err := p.refresh(ctx, rec, pod); err != nil {
				return false
			}
		}
		if p.startContainers(ctx, rec, pod, env, creds) {
			if err := p.refresh(ctx, rec, pod); err != nil {
				return false
			}
		}
		p.runProbes(ctx, rec, pod)
	}
	status := computeStatus(rec, pod, p.hostIPNow())
	if isTerminal(status.Phase) && !rec.terminal {
		rec.terminal = true
		p.log.Info("pod finished", "pod", rec.key, "phase", status.Phase)
	}
	if rec.terminal && !rec.sandboxStopped {
		// Like the kubelet, free the sandbox of a finished pod; it is removed on delete.
		sctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		if _, err := p.runtime.StopPodSandbox(sctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: rec.sandboxID}); err == nil {
			rec.sandboxStopped = true
		}
		cancel()
	}
	p.publish(rec, status)
	return false
}

func isTerminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

func (p *Provider) hostIPNow() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hostIP
}
