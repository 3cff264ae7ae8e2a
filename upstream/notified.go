package upstream

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/provider"
)

// notified keeps the last pod a notifying provider reported for each of its
// pods, to answer for the provider when its GetPod or GetPodStatus fails.
// Upstream's pod controller took a notifying provider's notifications as its
// pods' statuses and ignored GetPod's errors, so some such providers never
// implemented those (interLink's virtual kubelet answers both with an error);
// vkubelet reads a pod's status from the provider after its first
// notification and while the pod is deleted.
type notified struct {
	now  func() time.Time
	mu   sync.Mutex
	pods map[types.NamespacedName]notifiedPod
}

type notifiedPod struct {
	pod *corev1.Pod // nil for a pod deleted before any notification
	// forgetAt, once the pod is deleted in the provider, is when a last
	// notification that never showed a container running or ended stops
	// answering: the pod is answered for as gone from then on (upstream's
	// contract: a DeletePod that succeeded has deleted the pod), until goneFor
	// later the entry goes. A pod last notified running keeps answering so,
	// and stays Terminating until the provider notifies its stop.
	forgetAt time.Time
}

// forgetAfter is how long past its grace period a deleted pod's last
// notification that never showed it run answers for it.
const forgetAfter = time.Minute

// goneFor is how long after forgetAt a deleted pod is answered for as gone
// before its entry goes: far longer than vkubelet takes to read a deleting
// pod's status again (every --status-poll-interval), so it is not missed.
const goneFor = 10 * time.Minute

func newNotified(now func() time.Time) *notified {
	return &notified{now: now, pods: map[types.NamespacedName]notifiedPod{}}
}

// remember keeps p (a copy the caller does not change) as its pod's latest.
func (n *notified) remember(p *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	old := n.pods[key]
	n.pods[key] = notifiedPod{pod: p, forgetAt: old.forgetAt}
}

// get returns a copy of the pod's last notification, or nil; gone reports a
// pod deleted in the provider whose notifications no longer answer, for one
// whose last notification did not say it stopped (no container statuses, say)
// would otherwise stay Terminating for good.
func (n *notified) get(namespace, name string) (p *corev1.Pod, gone bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.pods[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return nil, false
	}
	if !e.forgetAt.IsZero() && !n.now().Before(e.forgetAt) && !ran(e.pod) {
		return nil, true
	}
	return e.pod.DeepCopy(), false
}

// ran reports whether notified pod p (nil if none came) showed a container
// running or ended: a pod that did may still run, whatever the time.
func ran(p *corev1.Pod) bool {
	if p == nil {
		return false
	}
	for _, cs := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range cs {
			if c.State.Running != nil || c.State.Terminated != nil {
				return true
			}
		}
	}
	return false
}

// created forgets what an earlier pod of the same name was reported as.
func (n *notified) created(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pods, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
}

// deleted schedules the pod's entry to go once vkubelet no longer waits for
// it, and removes the entries whose time has come.
func (n *notified) deleted(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	e := n.pods[key] // a pod never notified is answered for as gone too
	if e.forgetAt.IsZero() {
		e.forgetAt = now.Add(provider.GracePeriod(pod) + forgetAfter)
		n.pods[key] = e
	}
	for k, e := range n.pods {
		if !e.forgetAt.IsZero() && now.After(e.forgetAt.Add(goneFor)) {
			delete(n.pods, k)
		}
	}
}
