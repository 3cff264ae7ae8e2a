package pod

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/errdefs"
)

const testNode = "vk"

// fakeProvider is a scripted PodLifecycleHandler that records its calls.
type fakeProvider struct {
	mu       sync.Mutex
	pods     map[string]*corev1.Pod
	calls    []string
	failNext map[string]error // method -> error returned once
}

func newFakeProvider() *fakeProvider {
	return &fakeProvider{pods: map[string]*corev1.Pod{}, failNext: map[string]error{}}
}

func (f *fakeProvider) record(method string, key string) error {
	f.calls = append(f.calls, method+" "+key)
	if err := f.failNext[method]; err != nil {
		delete(f.failNext, method)
		return err
	}
	return nil
}

func (f *fakeProvider) CreatePod(_ context.Context, p *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("CreatePod", keyOf(p)); err != nil {
		return err
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.1",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	f.pods[keyOf(p)] = p
	return nil
}

func (f *fakeProvider) UpdatePod(_ context.Context, p *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record("UpdatePod", keyOf(p))
}

func (f *fakeProvider) DeletePod(_ context.Context, p *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DeletePod", keyOf(p)); err != nil {
		return err
	}
	if _, ok := f.pods[keyOf(p)]; !ok {
		return errdefs.NotFound("pod %s", keyOf(p))
	}
	return nil
}

func (f *fakeProvider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	if !ok {
		return nil, errdefs.NotFound("pod %s/%s", ns, name)
	}
	return p.DeepCopy(), nil
}

func (f *fakeProvider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	p, err := f.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &p.Status, nil
}

func (f *fakeProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out, nil
}

// terminate makes the provider report every container of the pod terminated.
func (f *fakeProvider) terminate(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pods[key]
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	}
}

func (f *fakeProvider) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// fixture is a controller over a fake clientset whose handlers the tests call
// directly, as sample-controller's tests do.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	provider *fakeProvider
	recorder *record.FakeRecorder
	clock    *clocktesting.FakeClock
	tracer   trace.Tracer // nil: none
	c        *Controller
	ctx      context.Context
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		t:        t,
		client:   fake.NewClientset(objects...),
		provider: newFakeProvider(),
		recorder: record.NewFakeRecorder(100),
		clock:    clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	return f
}

// start builds the controller, syncs its informer and runs the start-up reconcile.
func (f *fixture) start() {
	f.t.Helper()
	c, err := NewController(Config{
		Client: f.client, NodeName: testNode, Provider: f.provider,
		Recorder: f.recorder, Clock: f.clock, StatusPollInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: f.tracer,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	f.ctx = ctx
	c.informers.Start(ctx.Done())
	c.informers.WaitForCacheSync(ctx.Done())
	if err := c.reconcileProvider(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.c = c
	f.client.ClearActions()
}

func (f *fixture) waitCached(key string, ok func(*corev1.Pod) bool) {
	f.t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if p, _, err := f.c.pods.get(ns, name); err == nil && ok(p) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("informer never showed the expected %s", key)
}

// writes returns the write actions the controller took on the API.
func (f *fixture) writes() []core.Action {
	var out []core.Action
	for _, a := range f.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:      testNode,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: "img:1"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

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
	f.provider.pods["ns/a"] = pod.DeepCopy()
	f.provider.pods["ns/a"].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f.start()

	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
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
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
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

func TestDeleteRemovesPodOnceGraceExpires(t *testing.T) {
	f := newFixture(t)
	pod := deletingPod("a", f.clock.Now(), 5)
	f.client = fake.NewClientset(pod)
	f.provider.pods["ns/a"] = pod.DeepCopy()
	f.provider.pods["ns/a"].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f.start()
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(4 * time.Second)
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("removed before the grace period ended: %v", w)
	}
	f.clock.Step(2 * time.Second)
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
}

func TestDeletePodIsRetriedUntilItSucceeds(t *testing.T) {
	f := newFixture(t)
	pod := deletingPod("a", f.clock.Now(), 30)
	f.client = fake.NewClientset(pod)
	f.provider.pods["ns/a"] = pod.DeepCopy()
	f.start()
	f.provider.failNext["DeletePod"] = errors.New("temporary")
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err == nil {
		t.Fatal("a failed DeletePod must fail the sync so it is retried")
	}
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("pod removed although DeletePod failed: %v", w)
	}
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
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
	if err := f.c.deleteHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	assertRemoved(t, f, "a", "uid-a")
}

func TestRestartReconcileDeletesProviderPodsTheAPIForgot(t *testing.T) {
	f := newFixture(t, newPod("kept"))
	f.provider.pods["ns/kept"] = newPod("kept")
	f.provider.pods["ns/orphan"] = newPod("orphan")
	f.start()
	if got := f.c.deleteQueue.Len(); got != 1 {
		t.Fatalf("delete queue has %d items, want the orphan", got)
	}
	if err := f.c.deleteHandler(f.ctx, "ns/orphan"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncHandler(f.ctx, "ns/kept"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.provider.callList(), ",")
	if got != "DeletePod ns/orphan" {
		t.Fatalf("provider calls after restart = %s; want only the orphan deleted and nothing created twice", got)
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
	changed, err := compact(p)
	if err != nil {
		t.Fatal(err)
	}
	same, _ := compact(old.DeepCopy())
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
