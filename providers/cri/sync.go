package cri

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// podRecord is what the provider knows of one pod. The fields marked "mu" are
// guarded by Provider.mu; the others belong to the pod's goroutine alone.
type podRecord struct {
	key  string
	uid  types.UID
	wake chan struct{} // a token wakes the goroutine before its next tick

	// mu
	pod          *corev1.Pod // as last accepted; replaced, never modified
	env          map[string][]corev1.EnvVar
	creds        []provider.RegistryCredential
	volumes      map[string]*provider.VolumeContents
	volumesDirty bool // volumes changed by UpdateResolvedPod: write them
	status       *corev1.PodStatus
	deleting     bool
	deleteBy     time.Time // deadline of the graceful stop
	sandboxID    string
	ctrIDs       map[string][2]string // container name → {current, previous} runtime IDs

	// goroutine only
	accepted       time.Time // CreatePod (or the sandbox's creation, after a restart)
	sandboxReady   bool
	sandboxSeen    bool // a sandbox of the pod has been ready
	sandboxStopped bool
	sandboxErr     string
	sandboxRetry   time.Time
	sandboxBackoff time.Duration // the current delay, for the status message
	// oldSandboxes are the pod's earlier sandboxes, stopped, kept while one of
	// their containers is still a container's current or previous instance: so
	// that restart counts, last states and `logs --previous` survive a sandbox
	// re-creation, as on a kubelet.
	oldSandboxes []string
	// sandboxAttempt numbers the pod's sandboxes (the CRI's attempt: the
	// runtime wants each sandbox of a pod under a name of its own).
	sandboxAttempt uint32
	// sandboxCfg is the configuration the current sandbox was made with, which
	// each CreateContainer passes along; nil until the sandbox is made (or, after
	// a restart of the provider, until a container is started).
	sandboxCfg *runtimeapi.PodSandboxConfig
	podIP      string
	initDone   bool
	terminal   bool
	killed     bool // stopped by DeletePod
	// deadlineExceeded: stopped for running longer than activeDeadlineSeconds.
	deadlineExceeded bool
	ctrs             map[string]*ctrState
	volumesWritten   bool
	// ephemeralEnded: the last state of ephemeral containers whose sandbox died;
	// they are not started again (see endEphemeral).
	ephemeralEnded map[string]*runtimeapi.ContainerStatus
}

// ctrState is what the pod's goroutine knows of one container of the pod.
type ctrState struct {
	cur, prev *runtimeapi.ContainerStatus // latest and previous instances; nil if none
	// stale: cur ran in an earlier sandbox of the pod, so it is not running now
	// whatever its last state said, and an init container runs again.
	stale bool

	// Why the container is waiting, when it is (image pull, back-off, create errors).
	waitReason, waitMessage string
	// Back-off of restarts (after a crash) and retries (after a failed pull or create):
	// the next try is not before retryAt; backoffFor is the container instance, or
	// the failure, the current delay was computed for.
	backoff    time.Duration
	retryAt    time.Time
	backoffFor string

	probes probeStates
}

func newPodRecord(rp *provider.ResolvedPod, accepted time.Time) *podRecord {
	rec := &podRecord{
		key:      podKey(rp.Pod.Namespace, rp.Pod.Name),
		uid:      rp.Pod.UID,
		wake:     make(chan struct{}, 1),
		pod:      rp.Pod,
		env:      rp.Env,
		creds:    rp.PullCredentials,
		volumes:  rp.Volumes,
		accepted: accepted,
		ctrs:     map[string]*ctrState{},
		ctrIDs:   map[string][2]string{},
	}
	rec.status = pendingStatus(rp.Pod, accepted)
	return rec
}

func (r *podRecord) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// podLocked returns a copy of the pod with its current status. Provider.mu is held.
func (r *podRecord) podLocked() *corev1.Pod {
	pod := r.pod.DeepCopy()
	pod.Status = *r.status.DeepCopy()
	return pod
}

func (r *podRecord) ctr(name string) *ctrState {
	cs := r.ctrs[name]
	if cs == nil {
		cs = &ctrState{}
		r.ctrs[name] = cs
	}
	return cs
}

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
		for name, st := range rec.ctrs {
			if st.cur != nil && st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				p.stopContainer(ctx, rec, pod, name, st.cur.Id)
			}
		}
		rec.terminal, rec.deadlineExceeded = true, true
		if err := p.refresh(ctx, rec, pod); err != nil {
			return false
		}
	}
	if !rec.terminal {
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

// publish stores the pod's new status and, if it changed, hands the pod to the
// NotifyPods callback (outside the lock).
func (p *Provider) publish(rec *podRecord, status *corev1.PodStatus) {
	p.mu.Lock()
	keepTransitionTimes(rec.status, status)
	changed := !equality.Semantic.DeepEqual(rec.status, status)
	rec.status = status
	notify := p.notify
	var pod *corev1.Pod
	if changed && notify != nil {
		pod = rec.podLocked()
	}
	p.mu.Unlock()
	if changed {
		// What the pod controller was told, and when: with its own log, it tells
		// a status the provider never reached from one the API never got.
		p.log.Debug("pod status changed", "pod", rec.key, "phase", status.Phase, "ready", podReady(status), "notified", notify != nil)
	}
	if pod != nil {
		notify(pod)
	}
}

// podReady is the status of the pod's Ready condition.
func podReady(s *corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

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
		// The kubelet records these as Warning events of the pod; the provider
		// contract has no way to, so they are logged.
		p.log.Warn(w.message, "pod", rec.key, "reason", w.reason)
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
		rec.sandboxErr = err.Error()
		rec.sandboxBackoff = p.nextDelay(backoffKey(rec.uid, "", "sandbox"), time.Now())
		rec.sandboxRetry = time.Now().Add(rec.sandboxBackoff)
		p.log.Warn("creating sandbox", "pod", rec.key, "err", err)
		return false
	}
	rec.sandboxErr, rec.sandboxBackoff = "", 0
	p.backoffs.Reset(backoffKey(rec.uid, "", "sandbox"))
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
			st.cur, st.prev, st.stale = rec.ephemeralEnded[name], nil, false
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

// startContainers starts what should run now: the ephemeral containers that never
// ran, and the first init container not done, else every app container that never
// ran or may restart. It reports whether it started anything.
func (p *Provider) startContainers(ctx context.Context, rec *podRecord, pod *corev1.Pod, env map[string][]corev1.EnvVar, creds []provider.RegistryCredential) bool {
	if !rec.sandboxReady {
		return false
	}
	started := false
	// Ephemeral containers first: like the kubelet, they do not wait for the
	// init containers, which may be what the user is debugging.
	for _, c := range ephemeralContainers(pod) {
		started = p.startEphemeral(ctx, rec, pod, &c, env[c.Name], creds) || started
	}
	policy := pod.Spec.RestartPolicy
	rec.initDone = false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := rec.ctr(c.Name)
		sidecar := isSidecar(c)
		switch {
		case st.cur == nil:
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
			return started
		case st.stale:
			// A new sandbox runs the init containers again, as the kubelet's does;
			// their restart count goes on from the earlier sandbox's.
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
			return started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if !sidecar {
				return started
			}
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if st.cur.ExitCode == 0 && !sidecar {
				continue
			}
			if sidecar || policy != corev1.RestartPolicyNever {
				started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, true) || started
			}
			return started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			return p.startCreated(ctx, rec, c, st) || started
		default: // unknown: the runtime has not decided yet
			return started
		}
	}
	rec.initDone = true
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st := rec.ctr(c.Name)
		if st.cur != nil && st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if img, ok := st.cur.Annotations[annotationImage]; ok && img != c.Image {
				// UpdatePod changed the image: stop the container, its restart uses the new one.
				p.stopContainer(ctx, rec, pod, c.Name, st.cur.Id)
				st.backoffFor, st.retryAt = st.cur.Id, time.Time{} // restart at once
			}
		}
		switch {
		case st.cur == nil:
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
		case st.stale && st.cur.State != runtimeapi.ContainerState_CONTAINER_EXITED:
			// Created, or never seen stopped, in a sandbox that is gone.
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && shouldRestart(policy, st.cur.ExitCode):
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, true) || started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			started = p.startCreated(ctx, rec, c, st) || started
		}
	}
	return started
}

// startCreated starts a container that was created but never started: one whose
// creator died between CreateContainer and StartContainer (the node process was
// killed), since a pod's containers are created and started by one worker, in one
// go. Started now it keeps its attempt number: it never ran, so it is no restart.
// The dead process's own StartContainer may still be under way in the runtime
// ("already in starting state"): until the call's timeout has passed since the
// container was created, a failed start is tried again a second later. After
// that a container that will not start is removed, and the next sync creates it
// again.
func (p *Provider) startCreated(ctx context.Context, rec *podRecord, c *corev1.Container, st *ctrState) bool {
	now := time.Now()
	if now.Before(st.retryAt) {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := p.runtime.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: st.cur.Id}); err != nil {
		if now.Sub(time.Unix(0, st.cur.CreatedAt)) < rpcTimeout {
			st.retryAt = now.Add(time.Second)
			p.log.Debug("a container created before a restart does not start yet", "pod", rec.key, "container", c.Name, "err", err)
			return false
		}
		_, _ = p.runtime.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: st.cur.Id})
		st.waitReason, st.waitMessage = "RunContainerError", err.Error()
		st.backoff = p.nextDelay(backoffKey(rec.uid, c.Name, "start"), now)
		st.retryAt = time.Now().Add(st.backoff)
		p.log.Warn("starting a container created before a restart", "pod", rec.key, "container", c.Name, "err", err)
		return false
	}
	p.log.Info("started a container that was created but not started before a restart", "pod", rec.key, "container", c.Name, "id", st.cur.Id)
	return true
}

// initContainersDone reports whether the pod's init containers are done as the
// runtime was last read, as startContainers finds them: each exited 0 in the
// current sandbox, a sidecar running.
func initContainersDone(rec *podRecord, pod *corev1.Pod) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := rec.ctrs[c.Name]
		if st == nil || st.cur == nil || st.stale {
			return false
		}
		if isSidecar(c) {
			if st.cur.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				return false
			}
		} else if st.cur.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.cur.ExitCode != 0 {
			return false
		}
	}
	return true
}

// ranAny reports whether one of the pod's init or app containers has run.
func ranAny(rec *podRecord, pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if st := rec.ctrs[c.Name]; st != nil && st.cur != nil && st.cur.StartedAt != 0 {
				return true
			}
		}
	}
	return false
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func shouldRestart(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// nextDelay moves the back-off of key (client-go's flowcontrol, as the kubelet's
// crash loops use) to its next delay, from BackoffBase doubling up to BackoffMax,
// and returns it. at is when the failure happened: a back-off not moved for twice
// BackoffMax before it starts again from BackoffBase (a container that ran that
// long is no crash loop).
func (p *Provider) nextDelay(key string, at time.Time) time.Duration {
	p.backoffs.Next(key, at)
	return p.backoffs.Get(key)
}

// backoffKey names a back-off: of the pod's sandbox, or of one container's
// restarts after a crash ("crash") or tries after a failure to start ("start").
func backoffKey(uid types.UID, container, kind string) string {
	return string(uid) + "/" + container + "/" + kind
}

// forgetBackoffs drops the pod's back-offs once it is gone.
func (p *Provider) forgetBackoffs(rec *podRecord) {
	p.backoffs.DeleteEntry(backoffKey(rec.uid, "", "sandbox"))
	for name := range rec.ctrs {
		p.backoffs.DeleteEntry(backoffKey(rec.uid, name, "crash"))
		p.backoffs.DeleteEntry(backoffKey(rec.uid, name, "start"))
	}
}

// tryStart starts container c unless its back-off says to wait. restart is set when
// the container ran before and exited: its restart waits a back-off from its exit.
func (p *Provider) tryStart(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, env []corev1.EnvVar, creds []provider.RegistryCredential, st *ctrState, restart bool) bool {
	now := time.Now()
	if restart && st.backoffFor != st.cur.Id {
		// A new crash.
		st.backoff = p.nextDelay(backoffKey(rec.uid, c.Name, "crash"), time.Unix(0, st.cur.FinishedAt))
		st.backoffFor = st.cur.Id
		st.retryAt = time.Unix(0, st.cur.FinishedAt).Add(st.backoff)
		st.waitReason = "CrashLoopBackOff"
		st.waitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", st.backoff, c.Name, pod.Name, pod.Namespace, pod.UID)
	}
	if now.Before(st.retryAt) {
		if st.waitReason == "ErrImagePull" {
			st.waitReason = "ImagePullBackOff"
		}
		return false
	}
	var attempt uint32
	if st.cur != nil {
		attempt = st.cur.GetMetadata().GetAttempt() + 1
	}
	fail := func(reason string, err error) bool {
		st.waitReason, st.waitMessage = reason, err.Error()
		key := backoffKey(rec.uid, c.Name, "start")
		if st.backoffFor != reason {
			p.backoffs.Reset(key) // another failure starts its own back-off
		}
		st.backoff = p.nextDelay(key, now)
		st.backoffFor = reason
		st.retryAt = now.Add(st.backoff)
		p.log.Warn("starting container", "pod", rec.key, "container", c.Name, "reason", reason, "err", err)
		return false
	}
	sb := rec.sandboxCfg
	if sb == nil {
		// A sandbox found again after a restart of the provider.
		var err error
		if sb, _, err = p.sandboxConfig(pod); err != nil {
			return fail("CreateContainerConfigError", err)
		}
		sb.Metadata.Attempt = rec.sandboxAttempt
		rec.sandboxCfg = sb
	}
	if err := p.ensureImage(ctx, sb, c, creds); err != nil {
		reason := "ErrImagePull"
		if c.ImagePullPolicy == corev1.PullNever {
			reason = "ErrImageNeverPull"
		}
		return fail(reason, err)
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	target, err := targetID(rec, pod, c.Name)
	if err != nil {
		return fail("CreateContainerConfigError", err)
	}
	cfg, err := p.containerConfig(pod, c, env, attempt, rec.podIP)
	if err != nil {
		p.removeTerminationFiles(pod, c.Name, attempt, true)
		return fail("CreateContainerConfigError", err)
	}
	withTarget(cfg.Linux.SecurityContext.NamespaceOptions, target)
	created, err := p.runtime.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  rec.sandboxID,
		Config:        cfg,
		SandboxConfig: sb,
	})
	if err != nil {
		p.removeTerminationFiles(pod, c.Name, attempt, true)
		return fail("CreateContainerError", err)
	}
	if _, err := p.runtime.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		_, _ = p.runtime.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId})
		p.removeTerminationFiles(pod, c.Name, attempt, true)
		return fail("RunContainerError", err)
	}
	if !restart {
		st.backoff, st.backoffFor = 0, ""
	}
	p.backoffs.Reset(backoffKey(rec.uid, c.Name, "start"))
	st.waitReason, st.waitMessage = "", ""
	st.retryAt = time.Time{}
	p.log.Debug("container started", "pod", rec.key, "container", c.Name, "attempt", attempt, "id", created.ContainerId)
	return true
}

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
		wg.Wait()
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
