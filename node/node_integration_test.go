package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/node"
)

// The node-lifecycle controller of kube-controller-manager marks a node Unknown
// gracePeriod after its lease was last renewed.
const (
	gracePeriod   = 8 * time.Second
	leaseDuration = 6 * time.Second
	renewInterval = time.Second
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{ControllerManager: true, NodeMonitorGracePeriod: gracePeriod})
}

// fakeProvider is a NodeProvider and NodeConfigurer with a settable Ping answer.
type fakeProvider struct {
	mu      sync.Mutex
	pingErr error
	notify  func(*corev1.Node)
}

func (p *fakeProvider) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pingErr
}

func (p *fakeProvider) setPingErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pingErr = err
}

func (p *fakeProvider) NotifyNodeStatus(_ context.Context, notify func(*corev1.Node)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

// report calls the controller's NotifyNodeStatus callback.
func (p *fakeProvider) report(t *testing.T, n *corev1.Node) {
	t.Helper()
	p.mu.Lock()
	notify := p.notify
	p.mu.Unlock()
	if notify == nil {
		t.Fatal("NotifyNodeStatus was not called")
	}
	notify(n)
}

func (p *fakeProvider) ConfigureNode(_ context.Context, n *corev1.Node) {
	n.Status.Capacity = capacity("2")
	n.Status.Allocatable = capacity("2")
	n.Spec.ProviderID = "fake://" + n.Name
	n.Labels[corev1.LabelTopologyZone] = "zone-a"
	n.Labels[corev1.LabelTopologyRegion] = "region-1"
}

func capacity(gpus string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("200"),
		"nvidia.com/gpu":      resource.MustParse(gpus),
	}
}

// startNode runs a controller for a node named name until the test ends, then
// removes the node and its lease, and waits for the controller to be ready.
func startNode(t *testing.T, name string, p *fakeProvider) kubernetes.Interface {
	t.Helper()
	return startNodeWatching(t, name, p, nil)
}

// startNodeWatching is startNode with the Node watch w (nil: the node's own).
func startNodeWatching(t *testing.T, name string, p *fakeProvider, w *node.Watch) kubernetes.Interface {
	t.Helper()
	client := testenv.Client(t)
	t.Cleanup(func() { // runs after the controller has stopped: nothing re-creates them
		ctx := context.Background()
		if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
		err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting lease %s: %v", name, err)
		}
	})
	c, err := node.NewController(node.Config{
		Client:         client,
		NodeName:       name,
		ProviderName:   "fake",
		InternalIP:     "10.20.30.40",
		KubeletPort:    10250,
		KubeletVersion: "v1.37.1-vkubelet",
		Provider:       p,
		LeaseDuration:  leaseDuration,
		RenewInterval:  renewInterval,
		PingTimeout:    time.Second,
		Logger:         slog.New(slog.NewTextHandler(t.Output(), nil)),
		Watch:          w,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s not ready after 30s", name)
	}
	return client
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func findCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitReady waits until the node's Ready condition has the given status.
func waitReady(t *testing.T, c kubernetes.Interface, name string, want corev1.ConditionStatus, timeout time.Duration) *corev1.NodeCondition {
	t.Helper()
	var ready *corev1.NodeCondition
	testenv.Eventually(t, timeout, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready = findCondition(n, corev1.NodeReady)
		return ready != nil && ready.Status == want, fmt.Sprintf("node %s Ready = %+v, want %s", name, ready, want)
	})
	return ready
}

// waitLeaseOwnedBy waits until the node's lease is owned by the Node with uid and
// was renewed after the given time.
func waitLeaseOwnedBy(t *testing.T, c kubernetes.Interface, name string, uid types.UID, renewedAfter time.Time) *coordinationv1.Lease {
	t.Helper()
	var lease *coordinationv1.Lease
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		lease = l
		return len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == uid && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(renewedAfter),
			fmt.Sprintf("lease %s owners %+v renewed %v, want Node UID %s renewed after %s", name, l.OwnerReferences, l.Spec.RenewTime, uid, renewedAfter)
	})
	return lease
}

func TestNodeRegistersReadyWithRenewedLease(t *testing.T) {
	const name = "vk-it-register"
	c := startNode(t, name, &fakeProvider{})
	n := getNode(t, c, name)

	for k, v := range map[string]string{
		"type": "virtual-kubelet", "kubernetes.io/role": "agent", "kubernetes.io/hostname": name,
		"kubernetes.io/os": "linux", "node.kubernetes.io/exclude-from-external-load-balancers": "true",
		"topology.kubernetes.io/zone": "zone-a", "topology.kubernetes.io/region": "region-1",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Labels["kubernetes.io/arch"] == "" {
		t.Error("no kubernetes.io/arch label")
	}
	hasTaint := false
	for _, taint := range n.Spec.Taints {
		hasTaint = hasTaint || (taint.Key == node.TaintKey && taint.Value == "fake" && taint.Effect == corev1.TaintEffectNoSchedule)
	}
	if !hasTaint {
		t.Errorf("taints %v lack %s=fake:NoSchedule", n.Spec.Taints, node.TaintKey)
	}
	if n.Spec.ProviderID != "fake://"+name {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}
	if q := n.Status.Capacity["nvidia.com/gpu"]; q.String() != "2" {
		t.Errorf("capacity nvidia.com/gpu = %s, want 2", q.String())
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.String() != "2" {
		t.Errorf("allocatable nvidia.com/gpu = %s, want 2", q.String())
	}
	wantAddrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.20.30.40"}, {Type: corev1.NodeHostName, Address: name}}
	if fmt.Sprint(n.Status.Addresses) != fmt.Sprint(wantAddrs) {
		t.Errorf("addresses = %v, want %v", n.Status.Addresses, wantAddrs)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 10250 {
		t.Errorf("kubelet port = %d, want 10250", p)
	}
	if info := n.Status.NodeInfo; info.KubeletVersion != "v1.37.1-vkubelet" || info.OperatingSystem != "linux" || info.Architecture == "" {
		t.Errorf("nodeInfo = %+v", info)
	}
	waitReady(t, c, name, corev1.ConditionTrue, 10*time.Second)

	lease := waitLeaseOwnedBy(t, c, name, n.UID, time.Time{})
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != name ||
		lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != int32(leaseDuration/time.Second) {
		t.Errorf("lease spec = %+v", lease.Spec)
	}
	if ref := lease.OwnerReferences[0]; ref.APIVersion != "v1" || ref.Kind != "Node" || ref.Name != name {
		t.Errorf("lease owner = %+v", ref)
	}
	first := lease.Spec.RenewTime.Time
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), fmt.Sprintf("renewTime %s, not after %s", l.Spec.RenewTime, first)
	})
}

func TestNodeGoesUnknownWhilePingFailsAndReadyOnRecovery(t *testing.T) {
	const name = "vk-it-ping"
	p := &fakeProvider{}
	c := startNode(t, name, p)
	waitReady(t, c, name, corev1.ConditionTrue, 10*time.Second)

	p.setPingErr(errors.New("back end unreachable"))
	failed := time.Now()
	// The lease is no longer renewed; the node-lifecycle controller notices within its
	// grace period (it checks every second), well inside one lease period plus grace.
	waitReady(t, c, name, corev1.ConditionUnknown, leaseDuration+gracePeriod+5*time.Second)
	t.Logf("Ready became Unknown %s after Ping started failing", time.Since(failed).Round(100*time.Millisecond))

	p.setPingErr(nil)
	recovered := time.Now()
	ready := waitReady(t, c, name, corev1.ConditionTrue, 10*time.Second)
	t.Logf("Ready became True %s after Ping recovered", time.Since(recovered).Round(100*time.Millisecond))
	if ready.Reason != "VirtualKubeletReady" {
		t.Errorf("Ready reason = %q, want VirtualKubeletReady", ready.Reason)
	}
	// Times have second resolution: allow for the truncation.
	if ready.LastTransitionTime.Time.Before(recovered.Truncate(time.Second)) {
		t.Errorf("Ready transition time %s is before the recovery at %s", ready.LastTransitionTime, recovered)
	}
}

func TestOthersLabelAndConditionSurviveOurStatusWrites(t *testing.T) {
	const name = "vk-it-merge"
	p := &fakeProvider{}
	c := startNode(t, name, p)
	ctx := context.Background()

	// Another client adds a label, an annotation and a condition of its own.
	meta := `{"metadata":{"labels":{"other":"kept"},"annotations":{"example.com/note":"kept"}}}`
	if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(meta), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	cond := fmt.Sprintf(`{"status":{"conditions":[{"type":"example.com/Custom","status":"True","reason":"Other","message":"written by another client","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
	if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(cond), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}

	// The provider reports more GPUs: the controller writes the status at once.
	p.report(t, &corev1.Node{Status: corev1.NodeStatus{Capacity: capacity("4"), Allocatable: capacity("4")}})
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		n := getNode(t, c, name)
		q := n.Status.Capacity["nvidia.com/gpu"]
		return q.String() == "4", fmt.Sprintf("capacity nvidia.com/gpu = %s, want 4", q.String())
	})

	n := getNode(t, c, name)
	if n.Labels["other"] != "kept" || n.Annotations["example.com/note"] != "kept" {
		t.Errorf("others' label or annotation lost: labels %v, annotations %v", n.Labels, n.Annotations)
	}
	if custom := findCondition(n, "example.com/Custom"); custom == nil || custom.Reason != "Other" {
		t.Errorf("condition of another client lost: %+v", n.Status.Conditions)
	}
	if ready := findCondition(n, corev1.NodeReady); ready == nil || ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", ready)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.String() != "4" {
		t.Errorf("allocatable nvidia.com/gpu = %s, want 4", q.String())
	}
}

func TestDeletedNodeComesBackAndLeaseFollows(t *testing.T) {
	const name = "vk-it-delete"
	c := startNode(t, name, &fakeProvider{})
	ctx := context.Background()
	old := getNode(t, c, name)
	waitLeaseOwnedBy(t, c, name, old.UID, time.Time{})

	if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var back *corev1.Node
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		back = n
		return n.UID != old.UID, fmt.Sprintf("node %s still has the old UID %s", name, n.UID)
	})
	if back.Labels["type"] != "virtual-kubelet" || back.Spec.ProviderID != "fake://"+name {
		t.Errorf("re-created node lacks our content: labels %v, providerID %q", back.Labels, back.Spec.ProviderID)
	}
	if q := back.Status.Capacity["nvidia.com/gpu"]; q.String() != "2" {
		t.Errorf("re-created node capacity nvidia.com/gpu = %s, want 2", q.String())
	}
	// The garbage collector may delete the lease, still owned by the old UID when it
	// looked; the controller then creates it again. Either way, a few renewals later
	// the lease is there and owned by the new node.
	waitLeaseOwnedBy(t, c, name, back.UID, time.Now().Add(3*renewInterval))
	waitReady(t, c, name, corev1.ConditionTrue, 10*time.Second)
}

// Two nodes sharing one Node watch each hear of their own Node only: the deleted
// one registers again, the other one keeps its Node; one marked not Ready by
// someone else puts its status right at once, not at the next status update.
func TestNodesSharingAWatchEachFollowTheirOwnNode(t *testing.T) {
	client := testenv.Client(t)
	w, err := node.NewWatch(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done }) // registered before the nodes' cleanups, so run after them
	const a, b = "vk-it-shared-a", "vk-it-shared-b"
	startNodeWatching(t, a, &fakeProvider{}, w)
	startNodeWatching(t, b, &fakeProvider{}, w)
	oldA, oldB := getNode(t, client, a), getNode(t, client, b)

	if err := client.CoreV1().Nodes().Delete(ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.UID != oldA.UID, fmt.Sprintf("node %s still has the old UID %s", a, n.UID)
	})
	if n := getNode(t, client, b); n.UID != oldB.UID {
		t.Errorf("node %s was registered again (UID %s, was %s) when %s was deleted", b, n.UID, oldB.UID, a)
	}

	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	if _, err := client.CoreV1().Nodes().Patch(ctx, b, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	waitReady(t, client, b, corev1.ConditionTrue, 10*time.Second) // the status update is 1m away
}
