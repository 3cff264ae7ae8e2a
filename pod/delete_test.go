package pod

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

func deletingPod(name string, now time.Time, grace int64) *corev1.Pod {
	p := newPod(name)
	p.DeletionTimestamp = &metav1.Time{Time: now.Add(time.Duration(grace) * time.Second)}
	p.DeletionGracePeriodSeconds = &grace
	return p
}

func TestDeleteWaitsForProviderConfirmation(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	pod := deletingPod("a", now, 30)
	f.client = fake.NewClientset(pod)
	f.runningInProvider(pod)
	f.start()

	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); got[len(got)-1] != "DeletePod ns/a" {
		t.Fatalf("provider calls = %v, want DeletePod", got)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("pod removed before the provider confirmed: %v", w)
	}
	if ev := <-f.recorder.Events; ev != "Normal Killing Stopping pod in the provider (grace period 30s)" {
		t.Fatalf("event = %q", ev)
	}
	f.provider.terminate("ns/a")
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(f.provider.callList(), ","), "DeletePod"); n != 1 {
		t.Fatalf("DeletePod called %d times, want once", n)
	}
	assertRemoved(t, f, "a", "uid-a")
}

func assertRemoved(t *testing.T, f *fixture, name string, uid types.UID) {
	t.Helper()
	w := f.writes()
	if len(w) != 1 || w[0].GetVerb() != "delete" {
		t.Fatalf("want one delete, got %v", w)
	}
	opts := w[0].(core.DeleteActionImpl).DeleteOptions
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != uid {
		t.Fatalf("delete options = %+v, want grace 0 and UID precondition %s", opts, uid)
	}
}

// A deleted pod leaves the API only once the provider confirms it stopped,
// however long after its grace period that is: as a kubelet keeps a deleted
// pod until its containers stopped, so that a StatefulSet's replacement never
// runs beside it. The node says once why the pod stays.
func TestADeletedPodStaysUntilTheProviderConfirmsItStopped(t *testing.T) {
	f := pastGracePeriod(t, 0)
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("removed when its grace period ended, unconfirmed: %v", w)
	}
	if ev := nextEvent(f); !strings.HasPrefix(ev, "Warning StopNotConfirmed The grace period is over") {
		t.Fatalf("event = %q, want the Warning StopNotConfirmed", ev)
	}
	// An hour on, and with the provider unreachable for a poll: still there,
	// and not said again.
	f.clock.Step(time.Hour)
	f.provider.failNext["GetPodStatus"] = errors.New("provider unreachable")
	for range 2 {
		if err := f.handleDelete("ns/a"); err != nil {
			t.Fatal(err)
		}
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("removed unconfirmed an hour after its grace period: %v", w)
	}
	if ev := nextEvent(f); ev != "" {
		t.Fatalf("a second event %q, want the warning once", ev)
	}
	f.provider.terminate("ns/a")
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
	if n := strings.Count(strings.Join(f.provider.callList(), ","), "DeletePod"); n != 1 {
		t.Fatalf("DeletePod called %d times, want once", n)
	}
}

// A provider whose status cannot be read leaves the pod Terminating too, and
// the node's warning says what the provider answered.
func TestAnUnreadableProviderKeepsTheDeletedPodAndSaysWhy(t *testing.T) {
	f := pastGracePeriod(t, 0)
	f.provider.failNext["GetPodStatus"] = errors.New("connection refused")
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("removed while the provider's status could not be read: %v", w)
	}
	if ev := nextEvent(f); !strings.Contains(ev, "the provider's status of the pod cannot be read (connection refused)") {
		t.Fatalf("event = %q, want the warning with the provider's error", ev)
	}
}

// With RemoveUnconfirmedAfter, a node gives the promise up for pods its
// provider never confirms stopped: removed that long after the grace period.
func TestRemoveUnconfirmedAfterBoundsTheWait(t *testing.T) {
	f := pastGracePeriod(t, 30*time.Second)
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("removed a second after its grace period, with a bound of 30s: %v", w)
	}
	f.clock.Step(30 * time.Second)
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
	var events []string
	for ev := nextEvent(f); ev != ""; ev = nextEvent(f) {
		events = append(events, ev)
	}
	if len(events) != 2 || !strings.Contains(events[0], "or for 30s (the node's remove-unconfirmed-after setting)") ||
		!strings.HasPrefix(events[1], "Warning StopNotConfirmed Removed from the API 31s after its grace period") {
		t.Fatalf("events = %q, want the warning naming the bound and the removal's", events)
	}
}

// pastGracePeriod is a controller with removeUnconfirmedAfter whose provider
// runs pod ns/a, deleted with a grace period of 5 s, asked to stop it
// (Killing, the Event taken) and a second past that grace period now.
func pastGracePeriod(t *testing.T, removeUnconfirmedAfter time.Duration) *fixture {
	t.Helper()
	f := newFixture(t)
	f.removeUnconfirmedAfter = removeUnconfirmedAfter
	pod := deletingPod("a", f.clock.Now(), 5)
	f.client = fake.NewClientset(pod)
	f.runningInProvider(pod)
	f.start()
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(f); !strings.HasPrefix(ev, "Normal Killing") {
		t.Fatalf("event = %q, want Killing", ev)
	}
	f.clock.Step(6 * time.Second)
	return f
}

// nextEvent is the next event recorded, "" if none is.
func nextEvent(f *fixture) string {
	select {
	case ev := <-f.recorder.Events:
		return ev
	default:
		return ""
	}
}

func TestDeletePodIsRetriedUntilItSucceeds(t *testing.T) {
	f := newFixture(t)
	pod := deletingPod("a", f.clock.Now(), 30)
	f.client = fake.NewClientset(pod)
	f.provider.pods["ns/a"] = pod.DeepCopy()
	f.start()
	f.provider.failNext["DeletePod"] = errors.New("temporary")
	if err := f.handleDelete("ns/a"); err == nil {
		t.Fatal("a failed DeletePod must fail the sync so it is retried")
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("pod removed although DeletePod failed: %v", w)
	}
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(f.provider.callList(), ","), "DeletePod"); n != 2 {
		t.Fatalf("DeletePod called %d times, want 2", n)
	}
}

func TestPodNeverInProviderIsRemovedAtOnce(t *testing.T) {
	f := newFixture(t)
	f.client = fake.NewClientset(deletingPod("a", f.clock.Now(), 30))
	f.start()
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
}

// handleDelete runs the deletion handler on key and then the removals it
// queued, as the deletion and removal workers would.
// runningInProvider has the fake provider run pod, its container "c" running.
func (f *fixture) runningInProvider(pod *corev1.Pod) {
	running := pod.DeepCopy()
	running.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f.provider.pods[pod.Namespace+"/"+pod.Name] = running
}

func (f *fixture) handleDelete(key string) error {
	f.t.Helper()
	if err := f.c.deleteHandler(f.ctx, key); err != nil {
		return err
	}
	for f.c.removeQueue.Len() > 0 {
		k, _ := f.c.removeQueue.Get()
		err := f.c.removeHandler(f.ctx, k)
		f.c.removeQueue.Done(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// A stopped pod is removed from the API by the removal stage, not by the
// deletion worker that found it stopped, and a deletion handled again while
// its removal waits asks the provider nothing.
func TestAStoppedPodIsRemovedByTheRemovalStage(t *testing.T) {
	f := newFixture(t)
	pod := deletingPod("a", f.clock.Now(), 30)
	f.client = fake.NewClientset(pod)
	f.provider.pods["ns/a"] = pod.DeepCopy()
	f.provider.pods["ns/a"].Status.Phase = corev1.PodSucceeded
	f.start()

	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("the deletion worker wrote to the API: %v", w)
	}
	if n := f.c.removeQueue.Len(); n != 1 {
		t.Fatalf("removal queue has %d items, want the stopped pod", n)
	}
	calls := len(f.provider.callList())
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != calls {
		t.Fatalf("a deletion handled again while its removal waits called the provider: %v", got[calls:])
	}
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
	if f.c.removable.has("ns/a", "uid-a") {
		t.Fatal("the removed pod is still recorded as removable")
	}
}

// A removal queued for one incarnation of a name does not remove another.
func TestARemovalIsForTheIncarnationStopped(t *testing.T) {
	f := newFixture(t)
	f.client = fake.NewClientset(deletingPod("a", f.clock.Now(), 30))
	f.start()
	f.c.removable.add("ns/a", "uid-earlier")
	f.c.removeQueue.Add("ns/a")
	k, _ := f.c.removeQueue.Get()
	if err := f.c.removeHandler(f.ctx, k); err != nil {
		t.Fatal(err)
	}
	f.c.removeQueue.Done(k)
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("another incarnation's removal removed the pod: %v", w)
	}
}

// A notice of a pod stopped and waiting for its removal writes no status: the
// pod leaves the API with the one write of its removal, as when the deletion
// worker removed it itself.
func TestAPodWaitingForItsRemovalGetsNoStatusWrite(t *testing.T) {
	f := newFixture(t)
	pod := deletingPod("a", f.clock.Now(), 30)
	f.client = fake.NewClientset(pod)
	f.runningInProvider(pod)
	f.start()
	f.provider.terminate("ns/a")
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	notice, err := f.provider.GetPod(f.ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	f.c.handleProviderPod(notice)
	f.drainStatusChecks()
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("a pod waiting for its removal got writes: %v", w)
	}
	if err := f.handleDelete("ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
}
