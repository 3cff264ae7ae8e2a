package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
)

const testNode = "vk-test"

// t0 is the fake clock's start; JSON times have second resolution, so it is whole.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// testProvider is a NodeProvider and NodeConfigurer whose Ping answer tests set.
type testProvider struct {
	mu      sync.Mutex
	pingErr error
	notify  func(*corev1.Node)
}

func (p *testProvider) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pingErr
}

func (p *testProvider) setPingErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pingErr = err
}

func (p *testProvider) NotifyNodeStatus(_ context.Context, notify func(*corev1.Node)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

func (p *testProvider) notifier() func(*corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

func (p *testProvider) ConfigureNode(_ context.Context, n *corev1.Node) {
	n.Status.Capacity = testCapacity()
	n.Status.Allocatable = testCapacity()
	n.Spec.ProviderID = "test://" + n.Name
	n.Labels[corev1.LabelTopologyZone] = "zone-a"
	n.Labels[corev1.LabelTopologyRegion] = "region-1"
}

func testCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		"nvidia.com/gpu":      resource.MustParse("2"),
		"example.com/fpga":    resource.MustParse("1"),
	}
}

// fixture is a fake API server, a fake clock and a test provider.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	clock    *clocktesting.FakeClock
	provider *testProvider
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		t:        t,
		client:   fake.NewClientset(objects...),
		clock:    clocktesting.NewFakeClock(t0),
		provider: &testProvider{},
	}
	// The fake server assigns no UIDs; number created nodes as a real one would give
	// them distinct UIDs. Reactors run under the fake's lock, one at a time.
	created := 0
	f.client.PrependReactor("create", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		created++
		a.(core.CreateAction).GetObject().(*corev1.Node).UID = types.UID(fmt.Sprintf("uid-%d", created))
		return false, nil, nil
	})
	return f
}

// newController returns a configured controller, ready for its sync methods to be
// called directly (or for Run).
func (f *fixture) newController() *Controller {
	f.t.Helper()
	return f.newControllerWith(func(*Config) {})
}

// newControllerWith is newController with the config changed by change first.
func (f *fixture) newControllerWith(change func(*Config)) *Controller {
	f.t.Helper()
	cfg := Config{
		Client:               f.client,
		NodeName:             testNode,
		ProviderName:         "test",
		InternalIP:           "10.1.2.3",
		KubeletPort:          10250,
		KubeletVersion:       "v1.37.1-vkubelet",
		OperatingSystem:      "linux",
		Architecture:         "amd64",
		Provider:             f.provider,
		LeaseDuration:        40 * time.Second,
		RenewInterval:        10 * time.Second,
		StatusUpdateInterval: time.Minute,
		Clock:                f.clock,
		Logger:               slog.New(slog.NewTextHandler(f.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	change(&cfg)
	c, err := NewController(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	c.configure(context.Background())
	return c
}

// run starts c.Run, waits for Ready, and stops it when the test ends.
func (f *fixture) run(c *Controller) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run returned %v", err)
		}
	})
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		f.t.Fatal("controller not ready after 10s")
	}
}

// actions returns the actions taken, without the informer's list and watch.
func (f *fixture) actions() []core.Action {
	var out []core.Action
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		out = append(out, a)
	}
	return out
}

// expectActions checks the verbs, resources and subresources of the actions taken,
// in order, written as "verb resource[/subresource]".
func (f *fixture) expectActions(want ...string) []core.Action {
	f.t.Helper()
	got := f.actions()
	var gotS []string
	for _, a := range got {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		gotS = append(gotS, s)
	}
	if !reflect.DeepEqual(gotS, want) {
		f.t.Fatalf("actions = %q, want %q", gotS, want)
	}
	return got
}

// waitForAction polls the actions until one matches.
func (f *fixture) waitForAction(desc string, match func(core.Action) bool) core.Action {
	f.t.Helper()
	var found core.Action
	testenv.Eventually(f.t, 10*time.Second, func() (bool, string) {
		for _, a := range f.actions() {
			if match(a) {
				found = a
				return true, ""
			}
		}
		return false, "no action " + desc
	})
	return found
}

func (f *fixture) node() *corev1.Node {
	f.t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func isLeaseUpdateAt(at time.Time) func(core.Action) bool {
	return func(a core.Action) bool {
		u, ok := a.(core.UpdateAction)
		if !ok || a.GetResource().Resource != "leases" {
			return false
		}
		l := u.GetObject().(*coordinationv1.Lease)
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(at)
	}
}

func isStatusPatch(a core.Action) bool {
	return a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status"
}

// decodePatch unmarshals a patch body for structural comparison.
func decodePatch(t *testing.T, a core.Action) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.(core.PatchAction).GetPatch(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	return findCondition(n.Status.Conditions, t)
}

func TestRegisterCreatesNodeWithConfiguredContent(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	if err := c.writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	actions := f.expectActions("get nodes", "create nodes")
	got := actions[1].(core.CreateAction).GetObject().(*corev1.Node)

	now := metav1.NewTime(t0)
	cond := func(typ corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: testNode,
			Labels: map[string]string{
				"type":                          "virtual-kubelet",
				"kubernetes.io/role":            "agent",
				"kubernetes.io/hostname":        testNode,
				"kubernetes.io/os":              "linux",
				"kubernetes.io/arch":            "amd64",
				"topology.kubernetes.io/zone":   "zone-a",
				"topology.kubernetes.io/region": "region-1",
				"node.kubernetes.io/exclude-from-external-load-balancers": "true",
			},
		},
		Spec: corev1.NodeSpec{
			ProviderID: "test://" + testNode,
			Taints:     []corev1.Taint{{Key: TaintKey, Value: "test", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity:    testCapacity(),
			Allocatable: testCapacity(),
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, reasonReady, "vkubelet is ready"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, reasonMemoryOK, "vkubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, reasonDiskOK, "vkubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, reasonPIDOK, "vkubelet has sufficient PID available"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, reasonNetworkAvailable, "vkubelet network is ready"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "10.1.2.3"},
				{Type: corev1.NodeHostName, Address: testNode},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "v1.37.1-vkubelet", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("created node differs (-got +want):\n%s", diff.Diff(got, want))
	}
}

func TestRegisterWithoutTaintWhenDisabled(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	c.cfg.DisableTaint = true
	c.configure(context.Background())
	if err := c.writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	if taints := f.node().Spec.Taints; len(taints) != 0 {
		t.Fatalf("taints = %v, want none", taints)
	}
}

func TestRegisterOverExistingNodePatchesOnlyOurKeys(t *testing.T) {
	hourAgo := metav1.NewTime(t0.Add(-time.Hour))
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: testNode, UID: "uid-old", ResourceVersion: "42",
			Labels:      map[string]string{"other": "kept", "kubernetes.io/os": "linux"},
			Annotations: map[string]string{"example.com/note": "kept"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{"example.com/dongle": resource.MustParse("1")},
			Conditions: []corev1.NodeCondition{
				{Type: "example.com/Custom", Status: corev1.ConditionTrue, Reason: "Other", LastTransitionTime: hourAgo},
				{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: hourAgo},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: reasonMemoryOK, LastTransitionTime: hourAgo},
			},
		},
	}
	f := newFixture(t, existing)
	c := f.newController()
	if err := c.writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	actions := f.expectActions("get nodes", "patch nodes", "patch nodes/status")

	meta := actions[1].(core.PatchAction)
	if meta.GetPatchType() != types.MergePatchType {
		t.Errorf("metadata patch type = %s, want %s", meta.GetPatchType(), types.MergePatchType)
	}
	wantMeta := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": "42", // the taint list is replaced whole: conditional on what we read
			"labels": map[string]any{ // every label of ours but kubernetes.io/os, already right
				"type": "virtual-kubelet", "kubernetes.io/role": "agent", "kubernetes.io/hostname": testNode,
				"kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "zone-a",
				"topology.kubernetes.io/region":                           "region-1",
				"node.kubernetes.io/exclude-from-external-load-balancers": "true",
			},
		},
		"spec": map[string]any{
			"providerID": "test://" + testNode,
			"taints": []any{
				map[string]any{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
				map[string]any{"key": TaintKey, "value": "test", "effect": "NoSchedule"},
			},
		},
	}
	if got := decodePatch(t, meta); !reflect.DeepEqual(got, wantMeta) {
		t.Errorf("metadata patch (-got +want):\n%s", diff.Diff(got, wantMeta))
	}

	status := actions[2].(core.PatchAction)
	if status.GetPatchType() != types.StrategicMergePatchType {
		t.Errorf("status patch type = %s, want %s", status.GetPatchType(), types.StrategicMergePatchType)
	}

	n := f.node()
	if n.Labels["other"] != "kept" || n.Annotations["example.com/note"] != "kept" {
		t.Errorf("others' label or annotation lost: labels %v, annotations %v", n.Labels, n.Annotations)
	}
	if n.Labels["type"] != "virtual-kubelet" || n.Labels["topology.kubernetes.io/zone"] != "zone-a" {
		t.Errorf("our labels missing: %v", n.Labels)
	}
	if len(n.Spec.Taints) != 2 {
		t.Errorf("taints = %v, want the unreachable taint and ours", n.Spec.Taints)
	}
	if c := condition(n, "example.com/Custom"); c == nil || c.Reason != "Other" {
		t.Errorf("custom condition lost: %v", n.Status.Conditions)
	}
	ready := condition(n, corev1.NodeReady)
	if ready == nil || ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Time.Equal(t0) || !ready.LastHeartbeatTime.Time.Equal(t0) {
		t.Errorf("Ready = %+v, want True, transition and heartbeat at %s", ready, t0)
	}
	if mem := condition(n, corev1.NodeMemoryPressure); mem == nil || !mem.LastTransitionTime.Equal(&hourAgo) {
		t.Errorf("MemoryPressure = %+v, want its transition time kept at %s", mem, hourAgo)
	}
	if _, ok := n.Status.Capacity["example.com/dongle"]; !ok {
		t.Errorf("capacity written by others lost: %v", n.Status.Capacity)
	}
	if q := n.Status.Capacity["nvidia.com/gpu"]; q.String() != "2" {
		t.Errorf("capacity nvidia.com/gpu = %s, want 2", q.String())
	}
	if c.nodeUID != "uid-old" {
		t.Errorf("nodeUID = %q, want the existing node's", c.nodeUID)
	}
}

func TestTaintPatchConflictRereadsTheNode(t *testing.T) {
	existing := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-old", ResourceVersion: "1"}}
	f := newFixture(t, existing)
	// Someone changes the taints between our read and our write, once.
	conflicted := false
	f.client.PrependReactor("patch", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" || conflicted {
			return false, nil, nil
		}
		conflicted = true
		return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), testNode, errors.New("resourceVersion changed"))
	})
	c := f.newController()
	if err := c.writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.expectActions("get nodes", "patch nodes", "get nodes", "patch nodes", "patch nodes/status")
	if taints := f.node().Spec.Taints; len(taints) != 1 || taints[0].Key != TaintKey {
		t.Fatalf("taints = %v, want ours", taints)
	}
}

func TestRegisterAgainIsNoMetadataPatch(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx := context.Background()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	f.expectActions("get nodes", "patch nodes/status")
}

func TestFirstHeartbeatCreatesLeaseOwnedByNode(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx := context.Background()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	c.heartbeat(ctx)
	actions := f.expectActions("get leases", "create leases")

	got := actions[1].(core.CreateAction).GetObject().(*coordinationv1.Lease)
	holder, seconds, renew := testNode, int32(40), metav1.NewMicroTime(t0)
	want := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: testNode, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: "uid-1"}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &renew},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("created lease differs (-got +want):\n%s", diff.Diff(got, want))
	}
	select {
	case <-c.Ready():
	default:
		t.Fatal("Ready not closed after the first lease write")
	}
}

func TestRunRenewsLeaseEveryRenewInterval(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	for i := 1; i <= 3; i++ {
		f.clock.Step(10 * time.Second)
		f.waitForAction(fmt.Sprintf("lease renewal %d", i), isLeaseUpdateAt(t0.Add(time.Duration(i)*10*time.Second)))
	}
}

func TestNodesSharingATimerEachRenewTheirLeaseEveryRenewInterval(t *testing.T) {
	f := newFixture(t)
	timer := sharedtimer.New(f.clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); timer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done }) // after the controllers' own cleanups
	names := []string{testNode, "other-node"}
	for _, name := range names {
		f.run(f.newControllerWith(func(cfg *Config) { cfg.NodeName, cfg.Timer = name, timer }))
	}
	for i := 1; i <= 3; i++ {
		f.clock.Step(10 * time.Second)
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		for _, name := range names {
			f.waitForAction(fmt.Sprintf("renewal %d of %s", i, name), func(a core.Action) bool {
				return isLeaseUpdateAt(at)(a) && a.(core.UpdateAction).GetObject().(*coordinationv1.Lease).Name == name
			})
		}
	}
}

func TestAFailedRegistrationIsRetriedAtTheNextRenewal(t *testing.T) {
	f := newFixture(t)
	failed := false
	f.client.PrependReactor("create", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, errors.New("the API server is away")
	})
	c := f.newController()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.waitForAction("the first create", func(a core.Action) bool { return a.GetVerb() == "create" })
	select {
	case <-c.Ready():
		t.Fatal("ready although the node was not registered")
	default:
	}
	f.clock.Step(10 * time.Second)
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not ready 10s after the renewal that should retry the registration")
	}
	if n := f.node(); n.UID == "" {
		t.Errorf("registered node has no UID: %+v", n.ObjectMeta)
	}
}

func TestRunRefreshesStatusEveryStatusUpdateInterval(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	f.clock.Step(time.Minute)
	f.waitForAction("status refresh", isStatusPatch)
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		ready := condition(f.node(), corev1.NodeReady)
		return ready.LastHeartbeatTime.Time.Equal(t0.Add(time.Minute)),
			fmt.Sprintf("Ready heartbeat %s, want %s", ready.LastHeartbeatTime, t0.Add(time.Minute))
	})
}

func TestNoLeaseRenewalWhilePingFails(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx := context.Background()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	c.heartbeat(ctx)
	f.client.ClearActions()

	f.provider.setPingErr(errors.New("back end unreachable"))
	for range 3 {
		f.clock.Step(10 * time.Second)
		c.heartbeat(ctx)
	}
	c.syncNode(ctx) // a periodic status refresh is held back too
	f.expectActions()
	if c.healthy || !c.statusDirty {
		t.Fatalf("healthy=%v statusDirty=%v, want an unhealthy controller owing a status write", c.healthy, c.statusDirty)
	}
}

func TestPingRecoveryRenewsAtOnceAndSetsReadyTrue(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx := context.Background()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	c.heartbeat(ctx)
	f.provider.setPingErr(errors.New("back end unreachable"))
	f.clock.Step(10 * time.Second)
	c.heartbeat(ctx)

	// Meanwhile the node-lifecycle controller marks the node Unknown.
	unknown := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","lastTransitionTime":%q}]}}`,
		t0.Add(50*time.Second).Format(time.RFC3339))
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, testNode, types.StrategicMergePatchType, []byte(unknown), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()

	f.provider.setPingErr(nil)
	f.clock.Step(time.Minute)
	c.heartbeat(ctx)
	actions := f.expectActions("get nodes", "patch nodes/status", "update leases")

	recovered := t0.Add(70 * time.Second)
	if !isLeaseUpdateAt(recovered)(actions[2]) {
		t.Errorf("lease renewed with %+v, want renewTime %s", actions[2].(core.UpdateAction).GetObject(), recovered)
	}
	ready := condition(f.node(), corev1.NodeReady)
	if ready.Status != corev1.ConditionTrue || ready.Reason != reasonReady ||
		!ready.LastHeartbeatTime.Time.Equal(recovered) || !ready.LastTransitionTime.Time.Equal(recovered) {
		t.Fatalf("Ready = %+v, want True with heartbeat and transition at %s", ready, recovered)
	}
	if c.statusDirty {
		t.Fatal("status still owed after recovery")
	}
}

func TestNotifyNodeStatusPatchesStatusAtOnce(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	notify := f.provider.notifier()
	if notify == nil {
		t.Fatal("NotifyNodeStatus was not called")
	}

	// The provider now has 4 GPUs and no FPGA, and reports memory pressure.
	reported := &corev1.Node{Status: corev1.NodeStatus{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("4"),
		},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "Tight"}},
	}}
	notify(reported)
	reported.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("99") // ours to mutate: the controller copied it

	a := f.waitForAction("status patch after NotifyNodeStatus", isStatusPatch)
	capacity := decodePatch(t, a)["status"].(map[string]any)["capacity"].(map[string]any)
	if capacity["nvidia.com/gpu"] != "4" {
		t.Errorf("patched capacity nvidia.com/gpu = %v, want 4", capacity["nvidia.com/gpu"])
	}
	if v, ok := capacity["example.com/fpga"]; !ok || v != nil {
		t.Errorf("patched capacity example.com/fpga = %v (present %v), want null to remove it", v, ok)
	}
	n := f.node()
	if _, ok := n.Status.Capacity["example.com/fpga"]; ok {
		t.Errorf("example.com/fpga still in capacity: %v", n.Status.Capacity)
	}
	if mem := condition(n, corev1.NodeMemoryPressure); mem.Status != corev1.ConditionTrue || mem.Reason != "Tight" {
		t.Errorf("MemoryPressure = %+v, want True/Tight", mem)
	}
	if ready := condition(n, corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want it kept True", ready)
	}
	// Allocatable was not reported: it keeps what ConfigureNode gave.
	if q := n.Status.Allocatable["example.com/fpga"]; q.String() != "1" {
		t.Errorf("allocatable example.com/fpga = %s, want 1", q.String())
	}
}

func TestDeletedNodeIsRegisteredAgainAndLeaseFollows(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	ctx := context.Background()
	if err := f.client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		n, err := f.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.UID == "uid-2", fmt.Sprintf("node UID %q, want uid-2", n.UID)
	})
	n := f.node()
	if n.Labels["type"] != "virtual-kubelet" || len(n.Spec.Taints) != 1 || condition(n, corev1.NodeReady) == nil {
		t.Errorf("re-created node lacks our content: %+v", n)
	}
	// The lease is pointed at the new node without waiting for a renewal tick.
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		l, err := f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == "uid-2",
			fmt.Sprintf("lease owners %+v, want uid-2", l.OwnerReferences)
	})
}

func TestNewControllerDefaultsAndValidation(t *testing.T) {
	client := fake.NewClientset()
	c, err := NewController(Config{Client: client, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.OperatingSystem != "linux" || c.cfg.Architecture == "" || c.cfg.LeaseDuration != 40*time.Second ||
		c.cfg.RenewInterval != 10*time.Second || c.cfg.StatusUpdateInterval != 5*time.Minute || c.cfg.PingTimeout != 5*time.Second {
		t.Errorf("defaults not applied: %+v", c.cfg)
	}
	for name, cfg := range map[string]Config{
		"no client":           {NodeName: "n"},
		"no name":             {Client: client},
		"renew after expiry":  {Client: client, NodeName: "n", LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second},
		"sub-second lease":    {Client: client, NodeName: "n", LeaseDuration: 500 * time.Millisecond, RenewInterval: 100 * time.Millisecond},
		"negative ping limit": {Client: client, NodeName: "n", PingTimeout: -time.Second},
	} {
		if _, err := NewController(cfg); err == nil {
			t.Errorf("%s: NewController accepted %+v", name, cfg)
		}
	}
}

func TestRunTwiceFails(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("second Run returned nil")
	}
}

func TestANodeMarkedNotReadyBySomeoneElseIsPutRightAtOnce(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	f.run(c)
	// The node-lifecycle controller missed leases during an outage.
	n := f.node()
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	// Cleared before the update: the controller may answer it before
	// UpdateStatus returns here.
	f.client.ClearActions()
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitForAction("status patch after the node was marked not Ready", isStatusPatch)
	if ready := condition(f.node(), corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want True again", ready)
	}
}

func TestLeaseCurrentFollowsRenewals(t *testing.T) {
	f := newFixture(t)
	c := f.newController()
	ctx := context.Background()
	if err := c.LeaseCurrent(); err == nil {
		t.Fatal("a lease never written is current")
	}
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	c.heartbeat(ctx)
	if err := c.LeaseCurrent(); err != nil {
		t.Fatalf("just renewed: %v", err)
	}
	// The back end goes away: no renewal, and once the lease duration (40s) has
	// passed the lease is no longer current.
	f.provider.setPingErr(errors.New("back end unreachable"))
	for range 4 {
		f.clock.Step(10 * time.Second)
		c.heartbeat(ctx)
	}
	if err := c.LeaseCurrent(); err != nil {
		t.Fatalf("40s after the last renewal: %v", err)
	}
	f.clock.Step(time.Second)
	c.heartbeat(ctx)
	if err := c.LeaseCurrent(); err == nil || !strings.Contains(err.Error(), "41s ago") {
		t.Fatalf("41s after the last renewal: err = %v", err)
	}
	f.provider.setPingErr(nil)
	c.heartbeat(ctx)
	if err := c.LeaseCurrent(); err != nil {
		t.Fatalf("renewed again: %v", err)
	}
}

func TestTheLeaseIsRenewedFromTheKeptCopy(t *testing.T) {
	theirs := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: testNode, Namespace: corev1.NamespaceNodeLease, ResourceVersion: "7",
		Labels:        map[string]string{"set-by": "someone-else"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "someone-else", Operation: metav1.ManagedFieldsOperationUpdate}},
	}}
	f := newFixture(t, theirs)
	c := f.newController()
	ctx := context.Background()
	if err := c.writeNode(ctx); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	c.heartbeat(ctx)
	f.expectActions("get leases", "update leases")

	f.client.ClearActions()
	f.clock.Step(10 * time.Second)
	c.heartbeat(ctx)
	actions := f.expectActions("update leases") // no read: the kept copy is the base
	got := actions[0].(core.UpdateAction).GetObject().(*coordinationv1.Lease)
	if got.Labels["set-by"] != "someone-else" {
		t.Errorf("renewal dropped the lease's labels: %v", got.Labels)
	}
	if len(got.ManagedFields) != 0 {
		t.Errorf("renewal carries managed fields: %v", got.ManagedFields)
	}
	if got.Spec.RenewTime == nil || !got.Spec.RenewTime.Time.Equal(t0.Add(10*time.Second)) {
		t.Errorf("renewal's renewTime %v, want %s", got.Spec.RenewTime, t0.Add(10*time.Second))
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("renewal's owners %+v, want the Node uid-1", got.OwnerReferences)
	}
}
