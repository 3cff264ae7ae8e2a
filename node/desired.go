package node

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file holds the decisions of the controller as pure functions of state and
// time: what node to register, which patches bring an existing node in line, what
// lease to write. The controller only does the I/O around them.

// TaintKey is the key of the NoSchedule taint that keeps ordinary pods off the
// virtual node; its value is the provider name. Pods meant for the node tolerate it.
const TaintKey = "virtual-kubelet.io/provider"

// Labels vkubelet puts on every virtual node, beside kubernetes.io/hostname, os and arch.
const (
	labelType = "type"
	labelRole = "kubernetes.io/role"
)

// Reasons of the default conditions, in the style of the kubelet's "KubeletReady".
const (
	reasonReady            = "VirtualKubeletReady"
	reasonMemoryOK         = "VirtualKubeletHasSufficientMemory"
	reasonDiskOK           = "VirtualKubeletHasNoDiskPressure"
	reasonPIDOK            = "VirtualKubeletHasSufficientPID"
	reasonNetworkAvailable = "VirtualKubeletNetworkReady"
)

// desiredNode is the node vkubelet registers for cfg before the provider's
// ConfigureNode has added what it knows (capacity, providerID, topology, …).
// Condition times are left zero: they are stamped when the node is written.
func desiredNode(cfg Config) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.NodeName,
			Labels: map[string]string{
				labelType:                        "virtual-kubelet",
				labelRole:                        "agent",
				corev1.LabelHostname:             cfg.NodeName,
				corev1.LabelOSStable:             cfg.OperatingSystem,
				corev1.LabelArchStable:           cfg.Architecture,
				corev1.LabelNodeExcludeBalancers: "true",
			},
		},
		Status: corev1.NodeStatus{
			Conditions: defaultConditions(),
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: cfg.KubeletPort},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  cfg.KubeletVersion,
				OperatingSystem: cfg.OperatingSystem,
				Architecture:    cfg.Architecture,
			},
		},
	}
	if cfg.AsNode {
		delete(n.ObjectMeta.Labels, labelRole)
	}
	if !cfg.DisableTaint {
		n.Spec.Taints = []corev1.Taint{{Key: TaintKey, Value: cfg.ProviderName, Effect: corev1.TaintEffectNoSchedule}}
	}
	if cfg.InternalIP != "" {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: cfg.InternalIP})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: cfg.NodeName})
	return n
}

// withOperatorSettings adds the configuration's labels, taints and capacity to a
// node the provider has configured: the operator's word comes last.
func withOperatorSettings(n *corev1.Node, cfg Config) {
	for k, v := range cfg.Labels {
		if k == corev1.LabelHostname {
			continue
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[k] = v
	}
	n.Spec.Taints, _ = mergeTaints(n.Spec.Taints, cfg.Taints, false)
	overrideCapacity(&n.Status, cfg.Capacity)
}

// overrideCapacity sets each resource of capacity as the status's capacity and
// allocatable.
func overrideCapacity(st *corev1.NodeStatus, capacity corev1.ResourceList) {
	for name, q := range capacity {
		if st.Capacity == nil {
			st.Capacity = corev1.ResourceList{}
		}
		if st.Allocatable == nil {
			st.Allocatable = corev1.ResourceList{}
		}
		st.Capacity[name], st.Allocatable[name] = q.DeepCopy(), q.DeepCopy()
	}
}

// defaultConditions say the node is healthy; a provider may override any of them.
func defaultConditions() []corev1.NodeCondition {
	return []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: reasonReady, Message: "vkubelet is ready"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: reasonMemoryOK, Message: "vkubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: reasonDiskOK, Message: "vkubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: reasonPIDOK, Message: "vkubelet has sufficient PID available"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: reasonNetworkAvailable, Message: "vkubelet network is ready"},
	}
}

// withDefaultConditions returns conds plus every default condition whose type is
// missing, so a provider that reports only Ready still gets the pressure conditions.
func withDefaultConditions(conds []corev1.NodeCondition) []corev1.NodeCondition {
	out := append([]corev1.NodeCondition(nil), conds...)
	for _, d := range defaultConditions() {
		if findCondition(out, d.Type) == nil {
			out = append(out, d)
		}
	}
	return out
}

func findCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// withReportedStatus folds a status reported by the provider (NotifyNodeStatus) into
// the status vkubelet maintains: capacity, allocatable and addresses are taken when
// reported; conditions replace ours type by type, the others stay.
func withReportedStatus(cur corev1.NodeStatus, reported corev1.NodeStatus) corev1.NodeStatus {
	out := *cur.DeepCopy()
	if reported.Capacity != nil {
		out.Capacity = reported.Capacity.DeepCopy()
	}
	if reported.Allocatable != nil {
		out.Allocatable = reported.Allocatable.DeepCopy()
	}
	if len(reported.Addresses) > 0 {
		out.Addresses = append([]corev1.NodeAddress(nil), reported.Addresses...)
	}
	for _, rc := range reported.Conditions {
		if c := findCondition(out.Conditions, rc.Type); c != nil {
			*c = *rc.DeepCopy()
		} else {
			out.Conditions = append(out.Conditions, *rc.DeepCopy())
		}
	}
	return out
}

// conditionsAt stamps the desired conditions for a write at now: the heartbeat is
// now, and the transition time is kept from the condition currently on the server
// when its status is unchanged (now otherwise), as the kubelet does.
func conditionsAt(current, desired []corev1.NodeCondition, now time.Time) []corev1.NodeCondition {
	t := metav1.NewTime(now)
	out := make([]corev1.NodeCondition, 0, len(desired))
	for _, d := range desired {
		c := *d.DeepCopy()
		c.LastHeartbeatTime = t
		c.LastTransitionTime = t
		if prev := findCondition(current, d.Type); prev != nil && prev.Status == d.Status && !prev.LastTransitionTime.IsZero() {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		out = append(out, c)
	}
	return out
}

// nodeForCreate is the node to create when none exists.
func nodeForCreate(desired *corev1.Node, now time.Time) *corev1.Node {
	n := desired.DeepCopy()
	n.Status.Conditions = conditionsAt(nil, desired.Status.Conditions, now)
	return n
}

// mergeTaints returns current with every wanted taint present (matched by key and
// effect, value taken from want) and, with dropProviderTaint, without TaintKey
// taints; taints of others are kept in place. changed reports whether the list differs.
func mergeTaints(current, want []corev1.Taint, dropProviderTaint bool) (merged []corev1.Taint, changed bool) {
	wanted := make([]bool, len(want))
	for _, t := range current {
		if dropProviderTaint && t.Key == TaintKey {
			changed = true
			continue
		}
		for i, w := range want {
			if t.Key == w.Key && t.Effect == w.Effect {
				wanted[i] = true
				if t.Value != w.Value {
					t.Value, changed = w.Value, true
				}
				break
			}
		}
		merged = append(merged, t)
	}
	for i, w := range want {
		if !wanted[i] {
			merged, changed = append(merged, w), true
		}
	}
	return merged, changed
}

// metadataPatch returns a JSON merge patch that puts our labels, taints and
// providerID on current and touches nothing else, or nil when current has them all.
//
// Labels are merged key by key. Taints are a plain list that a merge patch replaces
// whole, so when they change the patch carries current's resourceVersion: a taint
// that someone else added after we read current makes the write fail with a
// conflict instead of being lost. providerID is immutable once set, so it is only
// ever filled in, never changed.
func metadataPatch(current, desired *corev1.Node, dropProviderTaint bool) ([]byte, error) {
	meta := map[string]any{}
	spec := map[string]any{}
	labels := map[string]string{}
	for k, v := range desired.Labels {
		if cur, ok := current.Labels[k]; !ok || cur != v {
			labels[k] = v
		}
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if taints, changed := mergeTaints(current.Spec.Taints, desired.Spec.Taints, dropProviderTaint); changed {
		if taints == nil {
			taints = []corev1.Taint{}
		}
		spec["taints"] = taints
		meta["resourceVersion"] = current.ResourceVersion
	}
	if desired.Spec.ProviderID != "" && current.Spec.ProviderID == "" {
		spec["providerID"] = desired.Spec.ProviderID
	}
	if len(meta) == 0 && len(spec) == 0 {
		return nil, nil
	}
	patch := map[string]any{}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("node %s: encoding metadata patch: %w", desired.Name, err)
	}
	return b, nil
}

// statusPatch returns the strategic merge patch of the status subresource that
// writes our status at now: our conditions (merged by type, so conditions of others
// survive), capacity and allocatable (merged by resource name; resources we wrote
// before, in written, and no longer report are removed), addresses (replaced whole:
// their merge key, type, is not unique), daemonEndpoints and nodeInfo, and, with
// declares, declaredFeatures (an atomic list, replaced whole; removed when
// empty). current is the node as last read, for the transition times of the
// conditions; written may be nil.
func statusPatch(current *corev1.Node, written writtenResources, desired *corev1.NodeStatus, declares bool, now time.Time) ([]byte, error) {
	status := map[string]any{
		"conditions":      conditionsAt(current.Status.Conditions, desired.Conditions, now),
		"daemonEndpoints": desired.DaemonEndpoints,
		"nodeInfo":        desired.NodeInfo,
	}
	if declares {
		status["declaredFeatures"] = desired.DeclaredFeatures // nil deletes
	}
	if r := resourcesPatch(written.capacity, desired.Capacity); len(r) > 0 {
		status["capacity"] = r
	}
	if r := resourcesPatch(written.allocatable, desired.Allocatable); len(r) > 0 {
		status["allocatable"] = r
	}
	addresses := []any{map[string]string{"$patch": "replace"}}
	for _, a := range desired.Addresses {
		addresses = append(addresses, a)
	}
	status["addresses"] = addresses
	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("node %s: encoding status patch: %w", current.Name, err)
	}
	return b, nil
}

// writtenResources names the resources of the status last written: all that a
// later patch needs of it, to delete those no longer reported (a node keeps
// names, not a copy of its whole status).
type writtenResources struct {
	capacity, allocatable []corev1.ResourceName
}

func writtenOf(s *corev1.NodeStatus) writtenResources {
	return writtenResources{capacity: slices.Collect(maps.Keys(s.Capacity)), allocatable: slices.Collect(maps.Keys(s.Allocatable))}
}

// resourcesPatch sets every resource of want and nulls (deletes) those of prev that
// want no longer has.
func resourcesPatch(prev []corev1.ResourceName, want corev1.ResourceList) map[corev1.ResourceName]any {
	out := map[corev1.ResourceName]any{}
	for _, name := range prev {
		if _, ok := want[name]; !ok {
			out[name] = nil
		}
	}
	for name, q := range want {
		out[name] = q.String()
	}
	return out
}

// renewedLease returns the lease to write at now: base (the lease as last read or
// written, nil to create one) held by the node, renewed now and owned by the Node
// with uid. An owner reference to an earlier Node of the same name (deleted and
// registered again) is replaced, so the garbage collector does not delete the lease.
func renewedLease(base *coordinationv1.Lease, nodeName string, uid types.UID, duration time.Duration, now time.Time) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if base != nil {
		l = base.DeepCopy()
	} else {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease}}
	}
	holder := nodeName
	seconds := int32(duration / time.Second)
	renew := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &renew

	refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: uid}}
	for _, r := range l.OwnerReferences {
		if r.Kind != "Node" || r.APIVersion != "v1" {
			refs = append(refs, r)
		}
	}
	if uid == "" {
		refs = refs[1:] // the Node's UID is not known yet: no reference rather than a wrong one
	}
	l.OwnerReferences = refs
	return l
}
