package pod

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Hour))
)

func running(name string, since metav1.Time, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}}
}

func TestAPodStartedAgainByAProviderThatLostItCountsARestart(t *testing.T) {
	api := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t0,
		ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 0)}}
	// What a provider that lost the pod reports once it is created again.
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t1,
		ContainerStatuses: []corev1.ContainerStatus{running("app", metav1.NewTime(t1.Add(1500*time.Millisecond)), 0)}}

	got := mergeStatus(api, fromProvider, statusSpec{})
	if !got.StartTime.Equal(&t0) {
		t.Errorf("startTime %v, want the first one %v", got.StartTime, t0)
	}
	cs := got.ContainerStatuses[0]
	if cs.RestartCount != 1 {
		t.Errorf("restartCount %d, want 1", cs.RestartCount)
	}
	last := cs.LastTerminationState.Terminated
	if last == nil || last.Reason != reasonContainerStatusUnknown || last.ExitCode != exitCodeContainerUnknown || !last.StartedAt.Equal(&t0) {
		t.Errorf("lastState %+v, want the lost instance, terminated with %s", cs.LastTerminationState, reasonContainerStatusUnknown)
	}
	if fromProvider.ContainerStatuses[0].RestartCount != 0 {
		t.Error("the provider's status was changed")
	}

	// The same instance reported again (the API keeps seconds only): nothing more.
	written := got
	written.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t1.Add(time.Second))
	again := mergeStatus(written, fromProvider, statusSpec{})
	if n := again.ContainerStatuses[0].RestartCount; n != 1 {
		t.Errorf("restartCount after the same report: %d, want 1", n)
	}
	if again.ContainerStatuses[0].LastTerminationState.Terminated == nil {
		t.Error("lastState lost after the same report")
	}
}

func TestAProviderThatCountsItsRestartsIsTakenAsItIs(t *testing.T) {
	api := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 2)}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: t0, FinishedAt: t1}}
	pc := running("app", t1, 3)
	pc.LastTerminationState = exited
	got := mergeStatus(api, &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{pc}}, statusSpec{})
	if cs := got.ContainerStatuses[0]; cs.RestartCount != 3 || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("got restartCount %d, lastState %+v; want the provider's 3 and exit code 1", cs.RestartCount, cs.LastTerminationState)
	}
}

func TestARestartCountNeverGoesBack(t *testing.T) {
	waiting := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	api := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 4)}}
	got := mergeStatus(api, &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting}}, statusSpec{})
	if cs := got.ContainerStatuses[0]; cs.RestartCount != 4 || cs.State.Waiting == nil {
		t.Errorf("got restartCount %d, state %+v; want 4 and the provider's waiting state", cs.RestartCount, cs.State)
	}
}

func TestAFirstStatusTakesTheProvidersStartTimeAndCounts(t *testing.T) {
	got := mergeStatus(corev1.PodStatus{Phase: corev1.PodPending}, &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t1,
		ContainerStatuses: []corev1.ContainerStatus{running("app", t1, 0)}}, statusSpec{})
	if !got.StartTime.Equal(&t1) || got.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("got startTime %v, restartCount %d; want %v and 0", got.StartTime, got.ContainerStatuses[0].RestartCount, t1)
	}
}

func TestTheStatusObservesTheGenerationItIsWrittenFor(t *testing.T) {
	api := corev1.PodStatus{ObservedGeneration: 1, Conditions: []corev1.PodCondition{
		{Type: "example.com/gate", Status: corev1.ConditionTrue, ObservedGeneration: 1}, // another writer's
	}}
	fromProvider := &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: "example.com/Provisioned", Status: corev1.ConditionTrue, ObservedGeneration: 1}, // says what it observed
	}}
	got := mergeStatus(api, fromProvider, statusSpec{generation: 2})
	if got.ObservedGeneration != 2 {
		t.Errorf("status.observedGeneration %d, want 2", got.ObservedGeneration)
	}
	want := map[corev1.PodConditionType]int64{"example.com/gate": 1, corev1.PodReady: 2, "example.com/Provisioned": 1}
	for _, c := range got.Conditions {
		if c.ObservedGeneration != want[c.Type] {
			t.Errorf("condition %s observes generation %d, want %d", c.Type, c.ObservedGeneration, want[c.Type])
		}
	}
	if fromProvider.Conditions[0].ObservedGeneration != 0 {
		t.Error("the provider's status was changed")
	}
	// Generation unknown: the API's observedGeneration stays (a patch to 0
	// would be ignored by the API server anyway).
	if got := mergeStatus(api, fromProvider, statusSpec{}); got.ObservedGeneration != 1 {
		t.Errorf("with no generation known, status.observedGeneration %d, want the API's 1", got.ObservedGeneration)
	}
}

// A spec change handed to the provider is followed by a status check, so the
// status observes the new generation even when the provider reports nothing new.
func TestAnUpdateHandedToTheProviderIsFollowedByAStatusCheck(t *testing.T) {
	p := newPod("a")
	p.Generation = 1
	f := newFixture(t, p)
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	p, err := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "example.com/maintenance", Operator: corev1.TolerationOpExists}}
	p.Generation = 2 // as the API server counts it; the fake does not
	if _, err := f.client.CoreV1().Pods("ns").Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Generation == 2 })
	for f.c.statusQueue.Len() > 0 {
		k, _ := f.c.statusQueue.Get()
		f.c.statusQueue.Done(k)
	}
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := f.provider.callList(); len(got) != 2 || got[1] != "UpdatePod ns/a" {
		t.Fatalf("provider calls = %v, want CreatePod, UpdatePod", got)
	}
	if n := f.c.statusQueue.Len(); n != 1 {
		t.Fatalf("%d status checks queued after UpdatePod, want 1", n)
	}
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool {
		return p.Status.ObservedGeneration == 2 && p.Status.Conditions[0].ObservedGeneration == 2
	})
}

func TestStatusPatchKeepsOthersConditions(t *testing.T) {
	pod := newPod("a")
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue}}
	pod.Status.QOSClass = corev1.PodQOSBestEffort
	f := newFixture(t, pod)
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	var patches []core.PatchAction
	for _, a := range f.writes() {
		if pa, ok := a.(core.PatchAction); ok && a.GetSubresource() == "status" {
			patches = append(patches, pa)
		}
	}
	if len(patches) != 1 || patches[0].GetPatchType() != types.StrategicMergePatchType {
		t.Fatalf("want one strategic-merge status patch, got %v", f.writes())
	}
	var body map[string]any
	_ = json.Unmarshal(patches[0].GetPatch(), &body)
	if body["metadata"].(map[string]any)["uid"] != "uid-a" {
		t.Fatalf("patch lacks the UID precondition: %s", patches[0].GetPatch())
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	// Others' gate first, then the provider's Ready and the two conditions it
	// left out (Initialized, ContainersReady), worked out by the node.
	if p.Status.QOSClass != corev1.PodQOSBestEffort || len(p.Status.Conditions) != 4 || p.Status.Conditions[0].Type != "example.com/gate" {
		t.Fatalf("others' fields lost: %+v", p.Status)
	}
	// Nothing changed since: the next status sync writes nothing.
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	f.client.ClearActions()
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("unchanged status was written again: %v", w)
	}
}

func TestAStatusChangedBySomeoneElseIsCheckedAgainstTheProvider(t *testing.T) {
	f := newFixture(t, newPod("a"))
	f.start()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.statusHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	old, err := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The node-lifecycle controller marks the pod not Ready while it cannot reach the node.
	p := old.DeepCopy()
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	changed, err := podwire.Compact(p)
	if err != nil {
		t.Fatal(err)
	}
	same, _ := podwire.Compact(old.DeepCopy())
	for f.c.statusQueue.Len() > 0 { // drain what the test's own writes queued
		k, _ := f.c.statusQueue.Get()
		f.c.statusQueue.Done(k)
	}
	f.c.handleUpdatedPod(same, same)
	if n := f.c.statusQueue.Len(); n != 0 {
		t.Errorf("an update that left the status alone queued %d status checks, want 0", n)
	}
	f.c.handleUpdatedPod(same, changed)
	if n := f.c.statusQueue.Len(); n != 1 {
		t.Errorf("an update that changed the status queued %d status checks, want 1", n)
	}
}
