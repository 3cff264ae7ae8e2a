package node

import (
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConditionsAt(t *testing.T) {
	then := metav1.NewTime(t0.Add(-time.Hour))
	now := metav1.NewTime(t0)
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: reasonReady}
	cases := []struct {
		name           string
		current        []corev1.NodeCondition
		wantTransition metav1.Time
	}{
		{"new condition transitions now", nil, now},
		{"unchanged status keeps its transition time",
			[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: then}}, then},
		{"changed status transitions now",
			[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: then}}, now},
		{"unchanged status without a transition time transitions now",
			[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, now},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := conditionsAt(tc.current, []corev1.NodeCondition{ready}, t0)
			if len(got) != 1 || !got[0].LastHeartbeatTime.Equal(&now) || !got[0].LastTransitionTime.Equal(&tc.wantTransition) {
				t.Fatalf("got %+v, want heartbeat %s and transition %s", got, now, tc.wantTransition)
			}
		})
	}
}

func TestMergeTaints(t *testing.T) {
	ours := corev1.Taint{Key: TaintKey, Value: "mock", Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	cases := []struct {
		name        string
		current     []corev1.Taint
		want        []corev1.Taint
		drop        bool
		wantMerged  []corev1.Taint
		wantChanged bool
	}{
		{"added after others'", []corev1.Taint{notReady}, []corev1.Taint{ours}, false, []corev1.Taint{notReady, ours}, true},
		{"already there", []corev1.Taint{ours, notReady}, []corev1.Taint{ours}, false, []corev1.Taint{ours, notReady}, false},
		{"value updated in place",
			[]corev1.Taint{{Key: TaintKey, Value: "old", Effect: corev1.TaintEffectNoSchedule}, notReady},
			[]corev1.Taint{ours}, false, []corev1.Taint{ours, notReady}, true},
		{"removed when disabled", []corev1.Taint{notReady, ours}, nil, true, []corev1.Taint{notReady}, true},
		{"nothing to remove", []corev1.Taint{notReady}, nil, true, []corev1.Taint{notReady}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			merged, changed := mergeTaints(tc.current, tc.want, tc.drop)
			if !reflect.DeepEqual(merged, tc.wantMerged) || changed != tc.wantChanged {
				t.Fatalf("got %v changed=%v, want %v changed=%v", merged, changed, tc.wantMerged, tc.wantChanged)
			}
		})
	}
}

func TestWithReportedStatusReplacesConditionsByType(t *testing.T) {
	cur := corev1.NodeStatus{Conditions: defaultConditions(), Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n"}}}
	got := withReportedStatus(cur, corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "BackendDown"},
			{Type: "example.com/Quota", Status: corev1.ConditionTrue},
		},
	})
	if len(got.Conditions) != len(cur.Conditions)+1 {
		t.Fatalf("conditions %+v: want the defaults plus the new one", got.Conditions)
	}
	if r := findCondition(got.Conditions, corev1.NodeReady); r.Status != corev1.ConditionFalse || r.Reason != "BackendDown" {
		t.Errorf("Ready = %+v, want the reported one", r)
	}
	if len(got.Addresses) != 1 {
		t.Errorf("addresses %v: unreported addresses must be kept", got.Addresses)
	}
	if findCondition(cur.Conditions, corev1.NodeReady).Status != corev1.ConditionTrue {
		t.Error("withReportedStatus mutated its input")
	}
}

func TestRenewedLeaseReplacesOwnerOfEarlierNode(t *testing.T) {
	base := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: "n", Namespace: corev1.NamespaceNodeLease, ResourceVersion: "7",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: "old"}},
	}}
	got := renewedLease(base, "n", "new", 6*time.Second, t0)
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: "new"}}
	if !reflect.DeepEqual(got.OwnerReferences, want) {
		t.Errorf("owners = %+v, want %+v", got.OwnerReferences, want)
	}
	if got.ResourceVersion != "7" || *got.Spec.LeaseDurationSeconds != 6 || !got.Spec.RenewTime.Time.Equal(t0) || *got.Spec.HolderIdentity != "n" {
		t.Errorf("lease = %+v", got)
	}
	if base.OwnerReferences[0].UID != "old" {
		t.Error("renewedLease mutated its base")
	}
}

func TestANodeAuthenticatedAsItselfSetsNoLabelNodeRestrictionForbids(t *testing.T) {
	cfg := Config{NodeName: "vk", OperatingSystem: "linux", Architecture: "amd64"}
	if got := desiredNode(cfg).Labels[labelRole]; got != "agent" {
		t.Errorf("with another credential: %s = %q, want agent", labelRole, got)
	}
	cfg.AsNode = true
	labels := desiredNode(cfg).Labels
	if _, ok := labels[labelRole]; ok {
		t.Errorf("as the node: %s is set, which NodeRestriction refuses", labelRole)
	}
	if labels[labelType] != "virtual-kubelet" || labels[corev1.LabelHostname] != "vk" {
		t.Errorf("as the node: labels %v lack type or hostname", labels)
	}
}

// The operator's labels, taints and capacity come on top of the provider's; the
// hostname label stays the node's name.
func TestOperatorSettingsComeLast(t *testing.T) {
	cfg := Config{NodeName: "n1", ProviderName: "mock", OperatingSystem: "linux", Architecture: "amd64",
		Labels:   map[string]string{"site": "east", corev1.LabelHostname: "other", labelType: "hpc"},
		Taints:   []corev1.Taint{{Key: "dedicated", Value: "hpc", Effect: corev1.TaintEffectNoSchedule}},
		Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5000")},
	}
	n := desiredNode(cfg)
	// As a provider's ConfigureNode would.
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("8")}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	withOperatorSettings(n, cfg)
	if n.Labels["site"] != "east" || n.Labels[labelType] != "hpc" || n.Labels[corev1.LabelHostname] != "n1" {
		t.Errorf("labels %v", n.Labels)
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0].Key != TaintKey || n.Spec.Taints[1].Key != "dedicated" {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if pods, cpu := rl[corev1.ResourcePods], rl[corev1.ResourceCPU]; pods.Value() != 5000 || cpu.Value() != 8 {
			t.Errorf("pods %s, cpu %s: want the operator's 5000 pods and the provider's 8 CPUs", pods.String(), cpu.String())
		}
	}
	// A status the provider reports later keeps the operator's capacity.
	st := withReportedStatus(n.Status, corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}})
	overrideCapacity(&st, cfg.Capacity)
	if pods := st.Capacity[corev1.ResourcePods]; pods.Value() != 5000 {
		t.Errorf("after a reported status: pods %s", pods.String())
	}
}
