package pod

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// ephemeralProvider is the resolving fake provider that runs ephemeral containers
// (when runs is set) and keeps the pods handed to UpdateResolvedPod.
type ephemeralProvider struct {
	*resolvingProvider
	runs bool

	emu     sync.Mutex
	updated []*provider.ResolvedPod
}

func (e *ephemeralProvider) RunsEphemeralContainers() bool { return e.runs }

func (e *ephemeralProvider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	e.emu.Lock()
	e.updated = append(e.updated, rp)
	e.emu.Unlock()
	return e.resolvingProvider.UpdateResolvedPod(ctx, rp)
}

func (e *ephemeralProvider) updates() []*provider.ResolvedPod {
	e.emu.Lock()
	defer e.emu.Unlock()
	return slices.Clone(e.updated)
}

// addDebugger adds an ephemeral container to pod ns/a through the
// ephemeralcontainers subresource, as `kubectl debug` does, and waits for the
// informer to see it.
func addDebugger(f *fixture, ec corev1.EphemeralContainer) {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
	if _, err := f.client.CoreV1().Pods("ns").UpdateEphemeralContainers(f.ctx, "a", p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	n := len(p.Spec.EphemeralContainers)
	f.waitCached("ns/a", func(p *corev1.Pod) bool { return len(p.Spec.EphemeralContainers) == n })
}

func envFromConf(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Key: "k",
	}}}
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// An ephemeral container added to a running pod reaches a provider that runs them
// as an update; the pod's containers keep the environment they started with, the
// new container gets its own as resolved now.
func TestAddedEphemeralContainerReachesARunnerAsAnUpdate(t *testing.T) {
	pod := newPod("a")
	pod.Spec.Containers[0].Env = []corev1.EnvVar{envFromConf("K")}
	// Running, as the API says: it keeps the environment it started with.
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f := newFixture(t, pod, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v1"}})
	prov := &ephemeralProvider{resolvingProvider: &resolvingProvider{fakeProvider: f.provider}, runs: true}
	f.startWith(prov)
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v2"}}
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(f.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStale("ns/a")
	addDebugger(f, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Env: []corev1.EnvVar{envFromConf("K")}},
		TargetContainerName:      "c",
	})
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	ups := prov.updates()
	if len(ups) != 1 {
		t.Fatalf("UpdateResolvedPod called %d times, want once; provider calls %v", len(ups), prov.callList())
	}
	rp := ups[0]
	if n := len(rp.Pod.Spec.EphemeralContainers); n != 1 {
		t.Fatalf("the updated pod has %d ephemeral containers, want 1", n)
	}
	if got := envValue(rp.Env["c"], "K"); got != "v1" {
		t.Errorf("container c's K = %q, want v1, the value it started with", got)
	}
	if got := envValue(rp.Env["debugger"], "K"); got != "v2" {
		t.Errorf("ephemeral container's K = %q, want v2, resolved when it was added", got)
	}
	// Nothing new since: the next sync calls nothing.
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if n := len(prov.updates()); n != 1 {
		t.Errorf("UpdateResolvedPod called %d times after a sync with nothing new, want 1", n)
	}
}

// A provider that does not run ephemeral containers (none of the interface, or one
// that says no) never hears of them: each is reported Waiting with the reason, once,
// with a Warning Event.
func TestEphemeralContainerOfANonRunnerIsReportedWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(f *fixture)
	}{
		{"no EphemeralContainerRunner", func(f *fixture) { f.start() }},
		{"RunsEphemeralContainers false", func(f *fixture) {
			f.startWith(&ephemeralProvider{resolvingProvider: &resolvingProvider{fakeProvider: f.provider}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, newPod("a"))
			tc.start(f)
			if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
				t.Fatal(err)
			}
			addDebugger(f, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}})
			if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
				t.Fatal(err)
			}
			if calls := f.provider.callList(); len(calls) != 1 {
				t.Errorf("provider calls = %v, want only the CreatePod", calls)
			}
			p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
			if len(p.Status.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeral container statuses = %+v, want one", p.Status.EphemeralContainerStatuses)
			}
			cs := p.Status.EphemeralContainerStatuses[0]
			if w := cs.State.Waiting; cs.Name != "debugger" || cs.Image != "busybox" || w == nil ||
				w.Reason != ReasonEphemeralContainersNotSupported || w.Message != "the provider of node vk does not run ephemeral containers" {
				t.Errorf("status = %+v", cs)
			}
			if ev := <-f.recorder.Events; !strings.HasPrefix(ev, "Warning EphemeralContainersNotSupported Ephemeral container debugger not started") {
				t.Errorf("event = %q", ev)
			}
			// Reported: a later sync writes nothing and records nothing.
			f.waitCached("ns/a", func(p *corev1.Pod) bool { return len(p.Status.EphemeralContainerStatuses) == 1 })
			f.client.ClearActions()
			if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
				t.Fatal(err)
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("a second sync wrote %v", w)
			}
			select {
			case ev := <-f.recorder.Events:
				t.Errorf("a second sync recorded %q", ev)
			default:
			}
		})
	}
}

func TestStartedEnv(t *testing.T) {
	v := func(s string) []corev1.EnvVar { return []corev1.EnvVar{{Name: "V", Value: s}} }
	for _, tc := range []struct {
		name               string
		started, now, want map[string][]corev1.EnvVar
		same               bool // the result is started itself
	}{
		{"nothing new", map[string][]corev1.EnvVar{"c": v("old")}, map[string][]corev1.EnvVar{"c": v("new")}, map[string][]corev1.EnvVar{"c": v("old")}, true},
		{"an ephemeral container added", map[string][]corev1.EnvVar{"c": v("old")},
			map[string][]corev1.EnvVar{"c": v("new"), "debugger": v("new")},
			map[string][]corev1.EnvVar{"c": v("old"), "debugger": v("new")}, false},
		{"a container without env", map[string][]corev1.EnvVar{"c": nil}, map[string][]corev1.EnvVar{"c": v("new")}, map[string][]corev1.EnvVar{"c": nil}, true},
		{"a container not running", map[string][]corev1.EnvVar{"c": v("old"), "waiting": v("old")},
			map[string][]corev1.EnvVar{"c": v("new"), "waiting": v("new")},
			map[string][]corev1.EnvVar{"c": v("old"), "waiting": v("new")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.started)
			got := startedEnv(tc.started, tc.now, func(name string) bool { return name != "waiting" })
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for name, env := range tc.want {
				if !slices.Equal(got[name], env) {
					t.Errorf("%s: got %v, want %v", name, got[name], env)
				}
			}
			if len(tc.started) != before {
				t.Errorf("started was changed: %v", tc.started)
			}
			if same := reflect.ValueOf(got).UnsafePointer() == reflect.ValueOf(tc.started).UnsafePointer(); same != tc.same {
				t.Errorf("result is started itself: %v, want %v", same, tc.same)
			}
		})
	}
}
