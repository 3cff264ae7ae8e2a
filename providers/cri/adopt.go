package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// savedPod is what pod.json holds: enough to run the pod again after a restart.
type savedPod struct {
	Pod             *corev1.Pod                         `json:"pod"`
	Env             map[string][]corev1.EnvVar          `json:"env,omitempty"`
	PullCredentials []provider.RegistryCredential       `json:"pullCredentials,omitempty"`
	Volumes         map[string]*provider.VolumeContents `json:"volumes,omitempty"`
}

func (p *Provider) savePod(rp *provider.ResolvedPod) error {
	data, err := json.Marshal(savedPod{Pod: rp.Pod, Env: rp.Env, PullCredentials: rp.PullCredentials, Volumes: rp.Volumes})
	if err != nil {
		return err
	}
	dir := p.podDir(rp.Pod.UID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".pod.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.podFile(rp.Pod.UID))
}

// recover takes over the sandboxes of this node that the runtime already runs.
func (p *Provider) recover(ctx context.Context) error {
	readCtx, cancelRead := context.WithTimeout(ctx, takeOverReadTime)
	defer cancelRead()
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	list, err := p.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelNode: p.nodeName}},
	})
	if err != nil {
		return errdefs.Unavailable("cri: listing sandboxes on %s: %v", p.cfg.RuntimeEndpoint, err)
	}
	// The newest sandbox of each pod is its sandbox; older ones hold instances of
	// its containers from before a sandbox re-creation (refresh removes them
	// once newer instances replace those).
	newest := map[string]*runtimeapi.PodSandbox{}
	older := map[string][]string{}
	var stale []*runtimeapi.PodSandbox
	for _, sb := range list.Items {
		uid := sb.GetMetadata().GetUid()
		if cur, ok := newest[uid]; ok {
			if cur.CreatedAt > sb.CreatedAt {
				older[uid] = append(older[uid], sb.Id)
				continue
			}
			older[uid] = append(older[uid], cur.Id)
		}
		newest[uid] = sb
	}
	for uid, sb := range newest {
		data, err := os.ReadFile(p.podFile(types.UID(uid)))
		var saved savedPod
		if err == nil {
			err = json.Unmarshal(data, &saved)
		}
		if err != nil || saved.Pod == nil {
			p.log.Warn("removing a sandbox whose pod is unknown", "sandbox", sb.Id, "pod", providerutil.PodKey(sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName()), "err", err)
			stale = append(stale, sb)
			for _, id := range older[uid] {
				stale = append(stale, &runtimeapi.PodSandbox{Id: id})
			}
			continue
		}
		rp := &provider.ResolvedPod{Pod: saved.Pod, Env: saved.Env, PullCredentials: saved.PullCredentials, Volumes: saved.Volumes}
		rec := newPodRecord(rp, time.Unix(0, sb.CreatedAt))
		rec.sandboxID = sb.Id
		rec.oldSandboxes = older[uid]
		rec.sandboxAttempt = sb.GetMetadata().GetAttempt()
		p.readTakenOver(readCtx, rec)
		p.pods[rec.key] = rec
		p.log.Info("took over pod", "pod", rec.key, "uid", uid, "sandbox", sb.Id)
		p.startWorker(rec)
	}
	for _, sb := range stale {
		p.removeSandbox(ctx, sb.Id)
	}
	// Pods accepted but whose sandbox was never made (the process stopped in between)
	// are taken over too: their goroutine makes the sandbox.
	entries, err := os.ReadDir(p.podsDir())
	if err != nil {
		return fmt.Errorf("cri provider: %w", err)
	}
	for _, e := range entries {
		uid := e.Name()
		if _, ok := newest[uid]; ok {
			continue
		}
		data, err := os.ReadFile(p.podFile(types.UID(uid)))
		var saved savedPod
		if err == nil {
			err = json.Unmarshal(data, &saved)
		}
		if err != nil || saved.Pod == nil {
			p.log.Warn("removing the files of an unknown pod", "uid", uid, "err", err)
			_ = p.removePodDir(types.UID(uid))
			continue
		}
		rec := newPodRecord(&provider.ResolvedPod{Pod: saved.Pod, Env: saved.Env, PullCredentials: saved.PullCredentials, Volumes: saved.Volumes}, time.Now())
		if _, dup := p.pods[rec.key]; dup {
			_ = p.removePodDir(types.UID(uid))
			continue
		}
		p.pods[rec.key] = rec
		p.log.Info("took over pod without a sandbox", "pod", rec.key, "uid", uid)
		p.startWorker(rec)
	}
	return nil
}

// readTakenOver reads a pod taken over from the runtime before its goroutine
// runs, so that the status it reports from the start is what the runtime runs.
// The goroutine's first sync can come after the pod controller's first look (its
// start-up reconcile reads every pod's status and writes it), which otherwise
// found the status of a pod just accepted, every container ContainerCreating,
// and wrote it over the Running the API had. Probes start as runProbes starts
// them: a running container is started without a startup probe, and ready too
// without a readiness probe. A pod not read (a failure, or ctx over: the runtime
// is slow) is read by its goroutine, as before.
func (p *Provider) readTakenOver(ctx context.Context, rec *podRecord) {
	if ctx.Err() != nil {
		return
	}
	pod := rec.pod
	if err := p.refresh(ctx, rec, pod); err != nil {
		p.log.Warn("reading a pod taken over from the runtime", "pod", rec.key, "err", err)
		return
	}
	rec.initDone = initContainersDone(rec, pod)
	for _, c := range probedContainers(pod) {
		if st := rec.ctrs[c.Name]; st != nil && st.cur != nil && st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			st.probes = probeStates{containerID: st.cur.Id, started: c.StartupProbe == nil}
			st.probes.ready = st.probes.started && c.ReadinessProbe == nil
		}
	}
	rec.status = computeStatus(rec, pod, p.hostIP)
}

// removeSandbox stops and removes a sandbox and its containers, logging failures.
func (p *Provider) removeSandbox(ctx context.Context, id string) {
	if _, err := p.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		p.log.Warn("stopping sandbox", "sandbox", id, "err", err)
	}
	if _, err := p.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		p.log.Warn("removing sandbox", "sandbox", id, "err", err)
	}
}
