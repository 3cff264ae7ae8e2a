package pod

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestSyncCreatesPodInProvider(t *testing.T) {
	f := newFixture(t, newPod("a"))
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 1 || got[0] != "CreatePod ns/a" {
		t.Fatalf("provider calls = %v, want CreatePod ns/a", got)
	}
	select {
	case ev := <-f.recorder.Events:
		t.Fatalf("a successful create recorded an Event: %q", ev)
	default:
	}
	// A second sync of the unchanged pod calls nothing.
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 1 {
		t.Fatalf("re-sync of an unchanged pod called the provider: %v", got)
	}
}

func TestSyncUpdatesOnlyWhenUpdatableFieldChanged(t *testing.T) {
	f := newFixture(t, newPod("a"))
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	p.Status.Message = "status only"
	p, _ = f.client.CoreV1().Pods("ns").UpdateStatus(f.ctx, p, metav1.UpdateOptions{})
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Message == "status only" })
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 1 {
		t.Fatalf("a status change reached the provider: %v", got)
	}
	if cur, _ := f.c.pods.getCached("ns", "a"); f.c.state.get("ns/a").lastPod != cur {
		t.Fatal("the controller still holds the object the status change replaced")
	}
	p.Spec.Containers[0].Image = "img:2"
	if _, err := f.client.CoreV1().Pods("ns").Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image == "img:2" })
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 2 || got[1] != "UpdatePod ns/a" {
		t.Fatalf("image change: provider calls = %v, want UpdatePod", got)
	}
	p, _ = f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	p.Labels = map[string]string{"release": "2"}
	if _, err := f.client.CoreV1().Pods("ns").Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Labels["release"] == "2" })
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 3 || got[2] != "UpdatePod ns/a" {
		t.Fatalf("label change: provider calls = %v, want UpdatePod (the downward API shows labels)", got)
	}
}

func TestProviderFailureSetsStatusAndEvent(t *testing.T) {
	f := newFixture(t, newPod("a"))
	f.start()
	f.provider.failNext["CreatePod"] = errdefs.Unavailable("backend is down")
	err := f.c.syncHandler(f.ctx, "ns/a")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("sync error = %v, want the provider's error so the pod is retried", err)
	}
	select {
	case ev := <-f.recorder.Events:
		if !strings.Contains(ev, "Warning ProviderFailed CreatePod failed: backend is down") {
			t.Fatalf("event = %q", ev)
		}
	default:
		t.Fatal("no event recorded")
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if p.Status.Reason != ReasonProviderFailed || !strings.Contains(p.Status.Message, "backend is down") {
		t.Fatalf("status = %q %q, want reason ProviderFailed with the error", p.Status.Reason, p.Status.Message)
	}
	// The retry succeeds and the provider's status replaces the failure.
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Reason == ReasonProviderFailed })
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	p, _ = f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if p.Status.Phase != corev1.PodRunning || p.Status.Reason != "" {
		t.Fatalf("after retry: phase %s reason %q", p.Status.Phase, p.Status.Reason)
	}
}

func TestLostPodWithRestartPolicyNeverIsMarkedFailed(t *testing.T) {
	p := newPod("a")
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f := newFixture(t, p)
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if calls := f.provider.callList(); len(calls) != 0 {
		t.Fatalf("provider calls = %v; a lost Never pod must not be created again", calls)
	}
	got, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != ReasonProviderLost ||
		got.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("status = %+v, want Failed/ProviderLost with terminated containers", got.Status)
	}
}

func TestLostPodWithRestartPolicyAlwaysIsCreatedAgain(t *testing.T) {
	p := newPod("a")
	p.Status.Phase = corev1.PodRunning
	f := newFixture(t, p)
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if calls := f.provider.callList(); len(calls) != 1 || calls[0] != "CreatePod ns/a" {
		t.Fatalf("provider calls = %v, want CreatePod", calls)
	}
}

// A sync after a status-only change of the pod the provider runs decodes
// neither object: the last one here cannot be decoded, and the sync still
// succeeds, keeping the new object.
func TestAStatusOnlyChangeIsSyncedWithoutDecoding(t *testing.T) {
	f := newFixture(t, newPod("a"))
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.c.state.update("ns/a", func(s *podState) {
		s.lastPod = undecodable(s.lastPod)
	})
	p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	p.Status.Message = "status only"
	if _, err := f.client.CoreV1().Pods("ns").UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Message == "status only" })
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatalf("sync decoded the last object: %v", err)
	}
	if cur, _ := f.c.pods.getCached("ns", "a"); f.c.state.get("ns/a").lastPod != cur {
		t.Fatal("the controller does not hold the new object")
	}
	if got := f.provider.callList(); len(got) != 1 {
		t.Fatalf("provider calls = %v, want only the create", got)
	}
}
