package cri

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the stopping of containers and the teardown of a deleted pod.

// stopContainer stops one container within the pod's grace period, its preStop
// hook first.
func (p *Provider) stopContainer(ctx context.Context, rec *podRecord, pod *corev1.Pod, name, id string) {
	grace := provider.GracePeriod(pod)
	if c := specContainer(pod, name); hasPreStop(c) && grace > 0 {
		start := time.Now()
		hctx, cancel := context.WithTimeout(ctx, grace)
		p.preStop(hctx, rec.key, pod, c, id, p.probeHost(rec, pod))
		cancel()
		// In whole seconds, as the kubelet counts: a hook of 0.3s leaves all 5 of 5.
		grace = max(grace-time.Since(start).Truncate(time.Second), minStopGrace)
	}
	sctx, cancel := context.WithTimeout(ctx, grace+rpcTimeout)
	defer cancel()
	if _, err := p.runtime.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(grace / time.Second)}); err != nil {
		p.log.Warn("stopping container", "pod", rec.key, "container", name, "err", err)
	}
}

// killPod stops the pod's containers within the grace period (stopAll), then removes its
// sandbox and files, publishes its last status and forgets it. It returns false if
// the runtime failed it, to be tried again.
func (p *Provider) killPod(ctx context.Context, rec *podRecord, deleteBy time.Time) bool {
	p.mu.Lock()
	pod := rec.pod
	p.mu.Unlock()
	if rec.sandboxID != "" && !p.stopSandbox(ctx, rec, pod, deleteBy) {
		return false
	}
	for len(rec.oldSandboxes) > 0 {
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := p.runtime.RemovePodSandbox(rctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: rec.oldSandboxes[0]})
		cancel()
		if err != nil && !notFound(err) {
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

// stopSandbox stops the containers of the pod's current sandbox (stopAll),
// then the sandbox, and removes it. It returns false if the runtime failed
// it, to be tried again. A sandbox the runtime no longer has (removed behind
// the provider's back, by crictl rmp say) took its containers with it: the
// pod has stopped, and asking again would keep it Terminating for good.
func (p *Provider) stopSandbox(ctx context.Context, rec *podRecord, pod *corev1.Pod, deleteBy time.Time) bool {
	if err := p.refresh(ctx, rec, pod); err != nil {
		// The NotFound may be a container's, removed between the listing
		// and its status: only the sandbox's own answer says it is gone.
		if notFound(err) && p.sandboxGone(ctx, rec.sandboxID) {
			p.log.Info("the pod's sandbox is gone from the runtime already", "pod", rec.key, "sandbox", rec.sandboxID)
			return true
		}
		p.log.Warn("reading pod state to stop it", "pod", rec.key, "err", err)
		return false
	}
	p.stopAll(ctx, rec, pod, deleteBy)
	if err := p.refresh(ctx, rec, pod); err != nil && !notFound(err) {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := p.runtime.StopPodSandbox(rctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: rec.sandboxID}); err != nil && !notFound(err) {
		p.log.Warn("stopping sandbox", "pod", rec.key, "err", err)
		return false
	}
	if n := p.killStrays(pod); n > 0 {
		p.log.Warn("killed processes left in the pod's cgroup after its sandbox stopped", "pod", rec.key, "processes", n)
	}
	if _, err := p.runtime.RemovePodSandbox(rctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: rec.sandboxID}); err != nil && !notFound(err) {
		p.log.Warn("removing sandbox", "pod", rec.key, "err", err)
		return false
	}
	return true
}

// killStrays kills every process still in the pod's cgroup, in any hierarchy,
// and returns how many it found. Once the sandbox is stopped nothing of the pod
// may run, yet a runtime can lose track of a process: containerd 1.6 leaves a
// container's task running when a start is cut short (the node killed in the
// middle of it) and then reports the container exited, ignores a stop of it, and
// refuses to remove the sandbox ("cannot delete running task"), for good. The
// kubelet likewise kills what is left in a pod's cgroup before removing it.
func (p *Provider) killStrays(pod *corev1.Pod) int {
	pids := map[int]bool{}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		_ = filepath.WalkDir(filepath.Join(root, cgroupParent(pod)), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	for pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// notFound reports whether a runtime call failed because what it names (a
// sandbox, or a container) does not exist.
func notFound(err error) bool { return grpcstatus.Code(err) == codes.NotFound }

// sandboxGone reports whether the runtime says it has no sandbox id.
func (p *Provider) sandboxGone(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	_, err := p.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	return notFound(err)
}

// stopAll stops the pod's running containers at once, each after its preStop
// hook and the sidecars in their turn (stopOrder), all by deleteBy, a deadline a
// DeletePod may bring forward.
func (p *Provider) stopAll(ctx context.Context, rec *podRecord, pod *corev1.Pod, deleteBy time.Time) {
	running := map[string]bool{} // not exited: to stop
	ids := map[string]string{}
	var hooked []string // running, with a preStop hook
	for name, st := range rec.ctrs {
		if st.cur == nil || st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		running[name], ids[name] = true, st.cur.Id
		if st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING && hasPreStop(specContainer(pod, name)) {
			hooked = append(hooked, name)
		}
	}
	order := newStopOrder(pod, running)
	host := p.probeHost(rec, pod)
	var mu sync.Mutex // guards deleteBy
	until := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Until(deleteBy)
	}
	// The hooks and the turns end with the grace period.
	hctx, cancelHooks := context.WithCancel(ctx)
	defer cancelHooks()
	graceOver := time.AfterFunc(until(), cancelHooks)
	defer graceOver.Stop()

	done := make(chan struct{})
	var wg sync.WaitGroup
	for name, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer order.done(name)
			minimum := time.Duration(0)
			if slices.Contains(hooked, name) && until() > 0 {
				p.preStop(hctx, rec.key, pod, specContainer(pod, name), id, host)
				minimum = minStopGrace
			}
			if len(order.after[name]) > 0 {
				order.waitTurn(hctx, name)
				minimum = minStopGrace
			}
			timeout := int64(max(until().Round(time.Second), minimum, 0) / time.Second)
			sctx, cancel := context.WithTimeout(ctx, time.Duration(timeout)*time.Second+rpcTimeout)
			defer cancel()
			if _, err := p.runtime.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
				p.log.Warn("stopping container", "pod", rec.key, "container", name, "err", err)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	// Readiness is probed, and the status published, while the containers stop.
	var probing <-chan time.Time // none without a SyncInterval (tests' Providers)
	if every := p.cfg.SyncInterval.Duration; every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		probing = t.C
	}
	woken := false
	for {
		select {
		case <-probing:
			p.probeWhileStopping(ctx, rec, pod)
		case <-done:
			if woken {
				rec.wakeUp() // for the next sync, which this one may have delayed
			}
			return
		case <-rec.wake:
			woken = true
			// A DeletePod: its deadline may be sooner.
			p.mu.Lock()
			deleting, by := rec.deleting, rec.deleteBy
			p.mu.Unlock()
			mu.Lock()
			if deleting && by.Before(deleteBy) {
				deleteBy = by
			}
			mu.Unlock()
			graceOver.Reset(until())
		}
	}
}
