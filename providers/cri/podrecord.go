package cri

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// This file holds what the provider knows of each pod and its containers, kept by
// the pod's goroutine (sync.go).

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
	// round counts the pod's RestartAllContainers (restartall.go): each
	// container created carries the round it belongs to (labelRound), and
	// one of an earlier round is reset. Read back from the containers after a
	// restart of the provider.
	round uint32
	// restartingAll: the containers are being stopped for a RestartAllContainers,
	// which the pod's status says (condition AllContainersRestarting).
	restartingAll  bool
	volumesWritten bool
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
	// reset: cur ran in an earlier round of the pod, before a
	// RestartAllContainers (restartall.go): the container starts again as in a
	// new pod, its restart count going on.
	reset bool
	// restartNow is the instance stopped to be started again at once, whatever
	// its exit: to resize it (resizerestart.go).
	restartNow string

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
		key:      providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name),
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
