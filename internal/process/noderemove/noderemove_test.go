package noderemove

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/node"
)

const nodeName = "vk-remove"

var (
	podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podsKind     = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	pdbRefusal   = budgetRefusal()
)

// budgetRefusal is the Eviction API's answer when a budget allows no
// disruption.
func budgetRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget guard needs 1 healthy pods and has 1 currently"})
	return err
}

// fixture is a fake API server with a node, its Lease and pods, and a stand-in
// for the node's process: a pod whose eviction was accepted (it is
// terminating) is gone at the next list, as if the provider stopped it and the
// node removed it, unless the test holds it.
type fixture struct {
	t      *testing.T
	client *fake.Clientset

	mu sync.Mutex
	// refuse: the number of evictions of a pod (by name) a budget refuses
	// still; -1 refuses them all.
	refuse map[string]int
	// held: pods the node does not stop.
	held map[string]bool
	// onRefusal is called after each refused eviction.
	onRefusal func(refusals int)
	refusals  int
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(objects...), refuse: map[string]int{}, held: map[string]bool{}}
	tracker := f.client.Tracker()
	// Reactors run under the fake's lock: they use the tracker, never the client.
	f.client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(core.CreateAction).GetObject().(*policyv1.Eviction)
		f.mu.Lock()
		n := f.refuse[ev.Name]
		if n != 0 {
			if n > 0 {
				f.refuse[ev.Name] = n - 1
			}
			f.refusals++
			refusals, onRefusal := f.refusals, f.onRefusal
			f.mu.Unlock()
			if onRefusal != nil {
				onRefusal(refusals)
			}
			return true, nil, pdbRefusal
		}
		f.mu.Unlock()
		obj, err := tracker.Get(podsResource, ev.Namespace, ev.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.DeletionTimestamp = ptr.To(metav1.Now())
		return true, nil, tracker.Update(podsResource, p, p.Namespace)
	})
	// The fake applies no field selector: this lists the pods bound to the
	// node the selector names, once the node removed those it stopped.
	f.client.PrependReactor("list", "pods", func(a core.Action) (bool, runtime.Object, error) {
		want, _ := a.(core.ListAction).GetListRestrictions().Fields.RequiresExactMatch("spec.nodeName")
		obj, err := tracker.List(podsResource, podsKind, "")
		if err != nil {
			return true, nil, err
		}
		out := &corev1.PodList{}
		for _, p := range obj.(*corev1.PodList).Items {
			f.mu.Lock()
			held := f.held[p.Name]
			f.mu.Unlock()
			if p.DeletionTimestamp != nil && !held {
				if err := tracker.Delete(podsResource, p.Namespace, p.Name); err != nil {
					return true, nil, err
				}
				continue
			}
			if p.Spec.NodeName == want {
				out.Items = append(out.Items, p)
			}
		}
		return true, out, nil
	})
	return f
}

func (f *fixture) config() Config {
	return Config{Client: f.client, PollInterval: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(f.t.Output(), nil))}
}

// expectActions checks the actions taken, in order, written as
// "verb resource[/subresource] [name]".
func (f *fixture) expectActions(want ...string) {
	f.t.Helper()
	var got []string
	for _, a := range f.client.Actions() {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		switch a := a.(type) {
		case core.CreateAction:
			if ev, ok := a.GetObject().(*policyv1.Eviction); ok {
				s += " " + ev.Name
			}
		case core.DeleteAction:
			s += " " + a.GetName()
		}
		got = append(got, s)
	}
	if !reflect.DeepEqual(got, want) {
		f.t.Fatalf("actions:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// podNames are the names of the pods left in the API.
func (f *fixture) podNames() []string {
	f.t.Helper()
	obj, err := f.client.Tracker().List(podsResource, podsKind, "")
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, p := range obj.(*corev1.PodList).Items {
		names = append(names, p.Name)
	}
	return names
}

func testNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
}

func testLease() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease}}
}

// pod is a pod bound to nodeName, changed by each of with.
func pod(name string, with ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName}}
	for _, w := range with {
		w(p)
	}
	return p
}

func ownedBy(apiVersion, kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", Controller: ptr.To(true)}}
	}
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
}

func terminating(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }

func onNode(name string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = name } }

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		// at the two stages: the Node there, the Node gone
		there, gone action
	}{
		{"a bare pod", pod("p"), evict, evict},
		{"a ReplicaSet's pod", pod("p", ownedBy("apps/v1", "ReplicaSet")), evict, evict},
		{"a DaemonSet's pod", pod("p", ownedBy("apps/v1", "DaemonSet")), deferred, evict},
		{"a pod owned by another group's DaemonSet kind", pod("p", ownedBy("example.com/v1", "DaemonSet")), evict, evict},
		{"a terminating pod", pod("p", terminating), await, await},
		{"a terminating DaemonSet pod", pod("p", ownedBy("apps/v1", "DaemonSet"), terminating), await, await},
		{"a mirror pod", pod("p", mirror), skip, skip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.pod, nodeThere); got != tc.there {
				t.Errorf("with the Node there: %v, want %v", got, tc.there)
			}
			if got := decide(tc.pod, nodeGone); got != tc.gone {
				t.Errorf("with the Node gone: %v, want %v", got, tc.gone)
			}
		})
	}
}

// The node is cordoned and marked, its pods evicted and waited for, the Node
// deleted, then its DaemonSet's pod evicted and waited for, then its Lease
// deleted. A mirror pod and another node's pod are left alone.
func TestRemoveDrainsDeletesTheNodeThenItsDaemonSetPodsThenItsLease(t *testing.T) {
	f := newFixture(t, testNode(), testLease(),
		pod("bare"), pod("replica", ownedBy("apps/v1", "ReplicaSet")), pod("daemon", ownedBy("apps/v1", "DaemonSet")),
		pod("mirror", mirror), pod("elsewhere", onNode("other")))
	var cordoned *corev1.Node
	f.client.PrependReactor("delete", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		obj, err := f.client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", nodeName)
		if err == nil {
			cordoned = obj.(*corev1.Node)
		}
		return false, nil, nil
	})
	if err := Remove(context.Background(), f.config(), nodeName); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"patch nodes",
		"list pods", "create pods/eviction bare", "create pods/eviction replica",
		"list pods",
		"delete nodes "+nodeName,
		"list pods", "create pods/eviction daemon",
		"list pods",
		"delete leases "+nodeName,
		"get nodes",
	)
	if cordoned == nil || !node.BeingRemoved(cordoned) {
		t.Errorf("the Node as it was deleted: %+v, want it cordoned and marked for removal", cordoned)
	}
	if got, want := f.podNames(), []string{"elsewhere", "mirror"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pods left: %q, want %q", got, want)
	}
}

// Removing a node already gone is a success, once any pod still bound to it
// is gone and its Lease deleted: a removal run again after a failure finishes
// the work.
func TestRemovingANodeAlreadyGoneFinishesTheWork(t *testing.T) {
	f := newFixture(t, testLease(), pod("daemon", ownedBy("apps/v1", "DaemonSet")))
	if err := Remove(context.Background(), f.config(), nodeName); err != nil {
		t.Fatal(err)
	}
	f.expectActions("patch nodes", "list pods", "create pods/eviction daemon", "list pods", "delete leases "+nodeName, "get nodes")
	if left := f.podNames(); len(left) != 0 {
		t.Errorf("pods left: %q", left)
	}

	again := newFixture(t)
	if err := Remove(context.Background(), again.config(), nodeName); err != nil {
		t.Fatalf("removing a node that never was: %v", err)
	}
	again.expectActions("patch nodes", "list pods", "delete leases "+nodeName, "get nodes")
}

// An eviction a PodDisruptionBudget refuses is asked again until the budget
// allows it; the pods already terminating are waited for, not evicted again.
func TestARefusedEvictionIsAskedAgainUntilTheBudgetAllowsIt(t *testing.T) {
	f := newFixture(t, testNode(), testLease(), pod("guarded"), pod("stopping", terminating))
	f.refuse["guarded"] = 2
	if err := Remove(context.Background(), f.config(), nodeName); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"patch nodes",
		"list pods", "create pods/eviction guarded",
		"list pods", "create pods/eviction guarded",
		"list pods", "create pods/eviction guarded",
		"list pods",
		"delete nodes "+nodeName,
		"list pods",
		"delete leases "+nodeName,
		"get nodes",
	)
}

// When the time is up before the pods are gone, the error says so with its
// cause and names each pod left and why; the Node and its Lease stay, the
// node cordoned.
func TestOutOfTimeNamesThePodsLeftAndLeavesTheNode(t *testing.T) {
	f := newFixture(t, testNode(), testLease(), pod("guarded"), pod("stuck"))
	f.refuse["guarded"] = -1
	f.held["stuck"] = true
	timeout := errors.New("the removal's --timeout of 4m0s passed")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	f.onRefusal = func(n int) {
		if n == 3 {
			cancel(timeout)
		}
	}
	err := Remove(ctx, f.config(), nodeName)
	if !errors.Is(err, timeout) {
		t.Fatalf("Remove = %v, want the timeout", err)
	}
	for _, want := range []string{
		"node " + nodeName + ": ",
		"2 pods still bound",
		"ns/guarded (eviction refused: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget guard needs 1 healthy pods and has 1 currently)",
		"ns/stuck (terminating: the node has not yet confirmed that the provider stopped it)",
		"kubectl uncordon",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil || !node.BeingRemoved(n) {
		t.Errorf("the Node after the timeout: %+v, %v; want it there, cordoned and marked", n, err)
	}
	if _, err := f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), nodeName, metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease after the timeout: %v, want it there", err)
	}
}

// A request that fails in the client (its rate limiter, near the deadline)
// does not hide the budget's refusal in the error.
func TestTheBudgetsRefusalOutlivesAClientsFailure(t *testing.T) {
	f := newFixture(t, testNode(), pod("guarded"))
	timeout := errors.New("the removal's --timeout of 4m0s passed")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	asked := 0
	f.client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		asked++
		switch asked {
		case 1:
			return true, nil, pdbRefusal
		case 2:
			return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		}
		cancel(timeout)
		return true, nil, errors.New("context canceled")
	})
	err := Remove(ctx, f.config(), nodeName)
	if !errors.Is(err, timeout) || !strings.Contains(err.Error(), "ns/guarded (eviction refused: Cannot evict pod as it would violate the pod's disruption budget.") {
		t.Fatalf("Remove = %v, want the timeout with the budget's refusal", err)
	}
}

// The time running out while the node's pods are being listed does not hide
// what the lists before found: the pods left and why.
func TestTheTimeRunningOutInAListNamesThePodsTheLastListFound(t *testing.T) {
	f := newFixture(t, testNode(), pod("guarded"))
	f.refuse["guarded"] = -1
	timeout := errors.New("the removal's --timeout of 30s passed")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	lists := 0
	f.client.PrependReactor("list", "pods", func(a core.Action) (bool, runtime.Object, error) {
		if lists++; lists < 3 {
			return false, nil, nil
		}
		cancel(timeout) // the deadline passes while this list is in flight
		return true, nil, context.DeadlineExceeded
	})
	err := Remove(ctx, f.config(), nodeName)
	if !errors.Is(err, timeout) || !strings.Contains(err.Error(), "1 pod still bound") ||
		!strings.Contains(err.Error(), "ns/guarded (eviction refused: Cannot evict pod as it would violate the pod's disruption budget.") {
		t.Fatalf("Remove = %v, want the timeout with the pod left and the budget's refusal", err)
	}
}

// A request the credential may not make fails the removal at once, naming
// the step; it is not retried until the time is up.
func TestAForbiddenRequestFailsAtOnce(t *testing.T) {
	f := newFixture(t, testNode(), pod("p"))
	f.client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, apierrors.NewForbidden(podsResource.GroupResource(), "p", errors.New("no right"))
	})
	err := Remove(context.Background(), f.config(), nodeName)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "evicting pod ns/p") {
		t.Fatalf("Remove = %v, want Forbidden evicting ns/p", err)
	}
	f.expectActions("patch nodes", "list pods", "create pods/eviction p")
}

// A failed request the API server may answer later is retried.
func TestAFailedRequestIsRetried(t *testing.T) {
	f := newFixture(t, testNode())
	failures := 2
	f.client.PrependReactor("delete", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		return false, nil, nil
	})
	readFailed := false
	f.client.PrependReactor("get", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if !readFailed {
			readFailed = true
			return true, &corev1.Node{}, apierrors.NewServiceUnavailable("etcd is away")
		}
		return false, nil, nil
	})
	if err := Remove(context.Background(), f.config(), nodeName); err != nil {
		t.Fatal(err)
	}
	f.expectActions("patch nodes", "list pods", "delete nodes "+nodeName, "delete nodes "+nodeName, "delete nodes "+nodeName,
		"list pods", "delete leases "+nodeName, "get nodes", "get nodes")
}

// A failed request is asked again once PollInterval (up to 20% more) has passed
// on the clock, not before.
func TestAFailedRequestIsAskedAgainAfterThePollIntervalOnTheClock(t *testing.T) {
	f := newFixture(t, testNode())
	deletes := 0 // the fake client runs its reactors one at a time
	f.client.PrependReactor("delete", "nodes", func(core.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := f.config()
	cfg.Clock, cfg.PollInterval = clk, time.Second
	done := make(chan error, 1)
	go func() { done <- Remove(context.Background(), cfg, nodeName) }()
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return clk.HasWaiters(), "the removal does not wait on the clock"
	})
	clk.Step(time.Second - time.Nanosecond)
	if !clk.HasWaiters() {
		t.Fatal("the deletion was asked again before PollInterval had passed")
	}
	clk.Step(time.Second/5 + time.Nanosecond) // the most the jitter adds
	if err := eventually.Receive(t, done, 5*time.Second, "the removal"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("patch nodes", "list pods", "delete nodes "+nodeName, "delete nodes "+nodeName,
		"list pods", "delete leases "+nodeName, "get nodes")
}

// A node process that does not know the removal mark registers its Node again
// as soon as it is deleted: the removal says so rather than succeed.
func TestANodeRegisteredAgainFailsTheRemoval(t *testing.T) {
	f := newFixture(t, testNode())
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	f.client.PrependReactor("delete", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if err := f.client.Tracker().Delete(nodes, "", nodeName); err != nil {
			return true, nil, err
		}
		return true, nil, f.client.Tracker().Create(nodes, testNode(), "")
	})
	err := Remove(context.Background(), f.config(), nodeName)
	if err == nil || !strings.Contains(err.Error(), "registered again") {
		t.Fatalf("Remove = %v, want registered again", err)
	}
}

// RemoveAll removes each node, and its error names each node that failed.
func TestRemoveAllRemovesEachAndNamesEachFailure(t *testing.T) {
	other := testNode()
	other.Name = "vk-other"
	f := newFixture(t, testNode(), other)
	if err := RemoveAll(context.Background(), f.config(), []string{nodeName, "vk-other"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := f.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("%d nodes left", len(l.Items))
	}

	f = newFixture(t, testNode(), other)
	f.client.PrependReactor("patch", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetName() != "vk-other" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "vk-other", errors.New("not this one"))
	})
	err := RemoveAll(context.Background(), f.config(), []string{nodeName, "vk-other"})
	if err == nil || !strings.Contains(err.Error(), "node vk-other: cordoning the node") || strings.Contains(err.Error(), "node "+nodeName) {
		t.Fatalf("RemoveAll = %v, want vk-other's failure alone", err)
	}
	if _, err := f.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s after RemoveAll: %v, want it removed", nodeName, err)
	}
}
