package cri

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the starting of the pod's containers: the init containers in
// order (sidecars kept running), then the app containers, each started when it
// never ran or may restart and its back-off allows.

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
	rec.initDone = false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := rec.ctr(c.Name)
		sidecar := isSidecar(c)
		switch {
		case st.cur == nil:
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
			return started
		case st.stale || st.reset:
			// A new sandbox, or a new round after a RestartAllContainers, runs
			// the init containers again, as the kubelet's does; their restart
			// count goes on from the earlier instance's.
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
			return started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if !sidecar {
				return started
			}
			p.restartIfResized(ctx, rec, pod, c, st)
			if c.StartupProbe != nil && !startupSucceeded(st) && !appsStarted(rec, pod) {
				// As on a kubelet, the containers after a sidecar with a
				// startup probe wait for it to succeed.
				return started
			}
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if st.cur.ExitCode == 0 && !sidecar {
				continue
			}
			if sidecar || shouldRestart(c, pod, st.cur.ExitCode) || startsAgain(st) {
				started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, true) || started
			}
			if sidecar && appsStarted(rec, pod) {
				// Once the app containers have started, a sidecar restarts
				// beside them, as on a kubelet: the pod stays initialized.
				continue
			}
			return started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			return p.startCreatedWithHook(ctx, rec, pod, c, st) || started
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
			} else {
				p.restartIfResized(ctx, rec, pod, c, st)
			}
		}
		switch {
		case st.cur == nil, st.reset:
			// Never ran, or ran in the pod's round before a RestartAllContainers:
			// it starts as in a new pod.
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
		case st.stale && st.cur.State != runtimeapi.ContainerState_CONTAINER_EXITED:
			// Created, or never seen stopped, in a sandbox that is gone.
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, false) || started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && (shouldRestart(c, pod, st.cur.ExitCode) || startsAgain(st)):
			started = p.tryStart(ctx, rec, pod, c, env[c.Name], creds, st, true) || started
		case st.cur.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			started = p.startCreatedWithHook(ctx, rec, pod, c, st) || started
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

// startCreatedWithHook is startCreated followed by the container's postStart
// hook, which never ran.
func (p *Provider) startCreatedWithHook(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, st *ctrState) bool {
	if !p.startCreated(ctx, rec, c, st) {
		return false
	}
	p.recordEvent(pod, c.Name, corev1.EventTypeNormal, reasonStarted, "Container started")
	_ = p.postStart(ctx, rec, pod, c, st, st.cur.Id) // its failure is handled there
	return true
}

// initContainersDone reports whether the pod's init containers are done as the
// runtime was last read, as startContainers finds them: each exited 0 in the
// current sandbox, a sidecar running.
func initContainersDone(rec *podRecord, pod *corev1.Pod) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := rec.ctrs[c.Name]
		if st == nil || st.cur == nil || st.stale || st.reset {
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

// appsStarted reports whether one of the pod's app containers has been started
// in the current sandbox and round: the pod has been initialized.
func appsStarted(rec *podRecord, pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if st := rec.ctrs[c.Name]; st != nil && st.cur != nil && !st.stale && !st.reset {
			return true
		}
	}
	return false
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
	note := func(reason, message string) { p.recordEvent(pod, c.Name, corev1.EventTypeNormal, reason, message) }
	if err := p.ensureImage(ctx, sb, c, creds, note); err != nil {
		reason := "ErrImagePull"
		if c.ImagePullPolicy == corev1.PullNever {
			reason = "ErrImageNeverPull"
		}
		return fail(reason, err)
	}
	if err := p.checkRunAsNonRoot(ctx, pod, c); err != nil {
		return fail("CreateContainerConfigError", err)
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
	cfg.Labels[labelRound] = strconv.FormatUint(uint64(rec.round), 10)
	recordResources(cfg, pod, c)
	cfg.Linux.Resources.OomScoreAdj = p.oomScoreAdj(pod, c)
	// The pod's cgroup as the spec says now, before a container with new
	// limits goes under it: a resize whose container had to restart may have
	// left it behind (the kernel refuses a pod's CPU quota below that of a
	// container still running, and a container's above the pod's).
	cgroupErr := applyPodCgroup(cgroupRoot, pod)
	created, err := p.runtime.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  rec.sandboxID,
		Config:        cfg,
		SandboxConfig: sb,
	})
	if err != nil {
		p.removeTerminationFiles(pod, c.Name, attempt, true)
		return fail("CreateContainerError", err)
	}
	note(reasonCreated, "Container created")
	if _, err := p.runtime.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		_, _ = p.runtime.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId})
		p.removeTerminationFiles(pod, c.Name, attempt, true)
		return fail("RunContainerError", err)
	}
	note(reasonStarted, "Container started")
	if cgroupErr != nil {
		// The stopped instance's cgroup, with its old limits, may have held
		// the pod's back a moment ago; it is gone once another instance runs.
		if err := applyPodCgroup(cgroupRoot, pod); err != nil {
			p.log.Debug("setting the pod's cgroup limits", "pod", rec.key, "err", err)
		}
	}
	if !restart {
		st.backoff, st.backoffFor = 0, ""
	}
	p.backoffs.Reset(backoffKey(rec.uid, c.Name, "start"))
	st.waitReason, st.waitMessage = "", ""
	st.retryAt = time.Time{}
	p.log.Debug("container started", "pod", rec.key, "container", c.Name, "attempt", attempt, "id", created.ContainerId)
	_ = p.postStart(ctx, rec, pod, c, st, created.ContainerId) // its failure is handled there
	return true
}
