package pod

import (
	"context"
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
	// getPodsFailures is how many GetPods calls fail before they succeed;
	// getPodsCalls counts the calls.
	getPodsFailures, getPodsCalls int
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

// GetPodStatus fails once after failNext["GetPodStatus"] is set; it is not
// recorded in calls, which the tests read for the calls that change pods.
func (f *fakeProvider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	f.mu.Lock()
	err := f.failNext["GetPodStatus"]
	delete(f.failNext, "GetPodStatus")
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	p, err := f.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &p.Status, nil
}

func (f *fakeProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getPodsCalls++
	if f.getPodsFailures > 0 {
		f.getPodsFailures--
		return nil, errdefs.Unavailable("the provider is away")
	}
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
	// removeUnconfirmedAfter is the controller's Config.RemoveUnconfirmedAfter.
	removeUnconfirmedAfter time.Duration
	clock                  *clocktesting.FakeClock
	tracer                 trace.Tracer // nil: none
	c                      *Controller
	ctx                    context.Context
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
		RemoveUnconfirmedAfter: f.removeUnconfirmedAfter,
		Logger:                 slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: f.tracer,
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
