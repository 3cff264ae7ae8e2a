package cri

import (
	"context"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// This file holds the pod's sandbox: creating it with back-off, and reading it and
// the containers of it and of the pod's earlier sandboxes back from the runtime,
// removing what no container needs any more.

// runSandbox creates the pod's sandbox, with back-off on failure. It reports whether
// the sandbox runs.
func (p *Provider) runSandbox(ctx context.Context, rec *podRecord, pod *corev1.Pod) bool {
	if time.Now().Before(rec.sandboxRetry) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := os.MkdirAll(p.podLogDir(pod), 0o755); err != nil {
		rec.sandboxErr = err.Error()
		return false
	}
	cfg, warnings, err := p.sandboxConfig(pod)
	if cfg != nil {
		cfg.Metadata.Attempt = rec.sandboxAttempt
	}
	for _, w := range warnings {
		// Warning Events of the pod, as the kubelet records them.
		p.log.Debug(w.message, "pod", rec.key, "reason", w.reason)
		p.recordEvent(pod, "", corev1.EventTypeWarning, w.reason, w.message)
	}
	if err != nil {
		rec.sandboxErr = err.Error()
		rec.sandboxBackoff = p.nextDelay(backoffKey(rec.uid, "", "sandbox"), time.Now())
		rec.sandboxRetry = time.Now().Add(rec.sandboxBackoff)
		p.log.Warn("configuring sandbox", "pod", rec.key, "err", err)
		return false
	}
	resp, err := p.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		p.recordEvent(pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+err.Error())
		rec.sandboxErr = err.Error()
		rec.sandboxBackoff = p.nextDelay(backoffKey(rec.uid, "", "sandbox"), time.Now())
		rec.sandboxRetry = time.Now().Add(rec.sandboxBackoff)
		p.log.Warn("creating sandbox", "pod", rec.key, "err", err)
		return false
	}
	rec.sandboxErr, rec.sandboxBackoff = "", 0
	p.backoffs.Reset(backoffKey(rec.uid, "", "sandbox"))
	// The pod's limits on its cgroup, which the runtime has just made, before
	// any container starts in it.
	if err := applyPodCgroup(cgroupRoot, pod); err != nil {
		p.log.Warn("setting the pod's cgroup limits", "pod", rec.key, "err", err)
	}
	rec.sandboxCfg = cfg
	p.mu.Lock()
	rec.sandboxID = resp.PodSandboxId
	p.mu.Unlock()
	p.log.Debug("sandbox created", "pod", rec.key, "sandbox", resp.PodSandboxId)
	return true
}

// refresh reads the sandbox and the pod's containers from the runtime, and removes
// the instances older than the previous one of each container.
func (p *Provider) refresh(ctx context.Context, rec *podRecord, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	sb, err := p.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: rec.sandboxID})
	if err != nil {
		return err
	}
	rec.sandboxReady = sb.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
	if rec.sandboxReady {
		// The pod keeps its IP in its status once its sandbox has stopped.
		rec.sandboxSeen = true
		rec.podIP = sb.GetStatus().GetNetwork().GetIp()
	}
	byName := map[string][]*runtimeapi.Container{}
	for _, sandbox := range append([]string{rec.sandboxID}, rec.oldSandboxes...) {
		list, err := p.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
			Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandbox},
		})
		if err != nil {
			return err
		}
		for _, c := range list.Containers {
			name := c.GetMetadata().GetName()
			byName[name] = append(byName[name], c)
		}
	}
	for _, cs := range byName {
		for _, c := range cs {
			rec.round = max(rec.round, roundOf(c))
		}
	}
	inUse := map[string]bool{} // sandboxes holding a current or previous instance
	ids := map[string][2]string{}
	for name, cs := range byName {
		sort.Slice(cs, func(i, j int) bool {
			if a, b := cs[i].GetMetadata().GetAttempt(), cs[j].GetMetadata().GetAttempt(); a != b {
				return a > b
			}
			return cs[i].CreatedAt > cs[j].CreatedAt
		})
		st := rec.ctr(name)
		known := []*runtimeapi.ContainerStatus{st.cur, st.prev}
		if st.cur, err = p.containerStatus(ctx, cs[0].Id, known); err != nil {
			return err
		}
		st.stale = cs[0].PodSandboxId != rec.sandboxID
		st.reset = roundOf(cs[0]) < rec.round
		inUse[cs[0].PodSandboxId] = true
		pair := [2]string{cs[0].Id, ""}
		st.prev = nil
		if len(cs) > 1 {
			if st.prev, err = p.containerStatus(ctx, cs[1].Id, known); err != nil {
				return err
			}
			pair[1] = cs[1].Id
			inUse[cs[1].PodSandboxId] = true
		}
		ids[name] = pair
		for _, old := range cs[min(len(cs), 2):] {
			if _, err := p.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: old.Id}); err != nil {
				p.log.Warn("removing old container", "pod", rec.key, "container", name, "id", old.Id, "err", err)
			}
		}
		if len(cs) > 2 {
			p.removeTerminationFiles(pod, name, cs[1].GetMetadata().GetAttempt(), false)
		}
	}
	for name, st := range rec.ctrs {
		if _, ok := byName[name]; !ok {
			st.cur, st.prev, st.stale, st.reset = rec.ephemeralEnded[name], nil, false, false
		}
	}
	kept := rec.oldSandboxes[:0]
	for _, old := range rec.oldSandboxes {
		if inUse[old] {
			kept = append(kept, old)
			continue
		}
		if _, err := p.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: old}); err != nil {
			p.log.Warn("removing an earlier sandbox", "pod", rec.key, "sandbox", old, "err", err)
			kept = append(kept, old)
		}
	}
	rec.oldSandboxes = kept
	p.mu.Lock()
	rec.ctrIDs = ids
	p.mu.Unlock()
	return nil
}

// containerStatus asks the runtime for a container's status, unless one of known
// is the same container already exited (its status cannot change any more). The
// status of an exited container carries its termination message.
func (p *Provider) containerStatus(ctx context.Context, id string, known []*runtimeapi.ContainerStatus) (*runtimeapi.ContainerStatus, error) {
	for _, k := range known {
		if k != nil && k.Id == id && k.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return k, nil
		}
	}
	resp, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, err
	}
	addTerminationMessage(ctx, resp.Status)
	return resp.Status, nil
}
