package cri

import (
	"context"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the stopping of containers and the teardown of a deleted pod.

// stopContainer stops one container within the pod's grace period.
func (p *Provider) stopContainer(ctx context.Context, rec *podRecord, pod *corev1.Pod, name, id string) {
	grace := provider.GracePeriod(pod)
	sctx, cancel := context.WithTimeout(ctx, grace+rpcTimeout)
	defer cancel()
	if _, err := p.runtime.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(grace / time.Second)}); err != nil {
		p.log.Warn("stopping container", "pod", rec.key, "container", name, "err", err)
	}
}

// killPod stops the pod's containers within the grace period, then removes its
// sandbox and files, publishes its last status and forgets it. It returns false if
// the runtime failed it, to be tried again.
func (p *Provider) killPod(ctx context.Context, rec *podRecord, deleteBy time.Time) bool {
	p.mu.Lock()
	pod := rec.pod
	p.mu.Unlock()
	if rec.sandboxID != "" {
		if err := p.refresh(ctx, rec, pod); err != nil {
			p.log.Warn("reading pod state to stop it", "pod", rec.key, "err", err)
			return false
		}
		var wg sync.WaitGroup
		timeout := int64(max(time.Until(deleteBy).Round(time.Second), 0) / time.Second)
		for name, st := range rec.ctrs {
			if st.cur == nil || st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
			wg.Add(1)
			go func(name, id string) {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, time.Duration(timeout)*time.Second+rpcTimeout)
				defer cancel()
				if _, err := p.runtime.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
					p.log.Warn("stopping container", "pod", rec.key, "container", name, "err", err)
				}
			}(name, st.cur.Id)
		}
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		p.probeWhileStopping(ctx, rec, pod, stopped)
		if err := p.refresh(ctx, rec, pod); err != nil {
			return false
		}
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		if _, err := p.runtime.StopPodSandbox(rctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: rec.sandboxID}); err != nil {
			cancel()
			p.log.Warn("stopping sandbox", "pod", rec.key, "err", err)
			return false
		}
		if _, err := p.runtime.RemovePodSandbox(rctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: rec.sandboxID}); err != nil {
			cancel()
			p.log.Warn("removing sandbox", "pod", rec.key, "err", err)
			return false
		}
		cancel()
	}
	for len(rec.oldSandboxes) > 0 {
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := p.runtime.RemovePodSandbox(rctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: rec.oldSandboxes[0]})
		cancel()
		if err != nil {
			p.log.Warn("removing an earlier sandbox", "pod", rec.key, "sandbox", rec.oldSandboxes[0], "err", err)
			return false
		}
		rec.oldSandboxes = rec.oldSandboxes[1:]
	}
	rec.sandboxReady, rec.killed = false, true
	status := computeStatus(rec, pod, p.hostIPNow())
	p.publish(rec, status)
	if err := p.removePodDir(rec.uid); err != nil {
		p.log.Warn("removing pod files", "pod", rec.key, "err", err)
	}
	_ = os.RemoveAll(p.podLogDir(pod))
	p.removePodCgroups(pod)
	p.forgetBackoffs(rec)
	p.mu.Lock()
	if p.pods[rec.key] == rec {
		delete(p.pods, rec.key)
	}
	p.mu.Unlock()
	p.log.Info("pod stopped and removed", "pod", rec.key, "uid", rec.uid)
	return true
}
