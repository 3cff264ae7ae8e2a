package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// Labels and annotations put on every object the provider creates in the target.
const (
	// LabelOffloadedBy says which virtual node (source cluster and node) owns the
	// object; the provider only reads and writes objects carrying its value.
	LabelOffloadedBy = "vkubelet.io/offloaded-by"
	// LabelOriginUID is the UID of the source pod the object belongs to.
	LabelOriginUID = "vkubelet.io/origin-uid"

	AnnotationOriginCluster   = "vkubelet.io/origin-cluster"
	AnnotationOriginNamespace = "vkubelet.io/origin-namespace"
	AnnotationOriginName      = "vkubelet.io/origin-name"
	AnnotationOriginUID       = "vkubelet.io/origin-uid"
)

const (
	maxLabelValue = 63  // label values and namespace names (DNS labels)
	maxObjectName = 253 // pod, ConfigMap and Secret names (DNS subdomains)
	hashLen       = 10
)

// shortHash is a stable hash of s, hashLen hex digits.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLen]
}

// truncateName returns s if it fits in max characters; otherwise its first
// characters and "-" and a hash of all of s, max characters in all. Distinct inputs
// stay distinct (up to hash collisions) and the result ends with an alphanumeric.
func truncateName(s string, max int) string {
	if len(s) <= max {
		return s
	}
	prefix := strings.TrimRight(s[:max-hashLen-1], "-.")
	return prefix + "-" + shortHash(s)
}

// nameWithHash is base-suffix-<hash of base and suffix>, cut to max: names of
// derived objects that cannot collide with each other whatever base and suffix are.
func nameWithHash(base, suffix string, max int) string {
	h := shortHash(base + "\x00" + suffix)
	s := base + "-" + suffix
	if len(s) > max-hashLen-1 {
		s = strings.TrimRight(s[:max-hashLen-1], "-.")
	}
	return strings.ToLower(s) + "-" + h
}

// mapper translates between source and target objects. It is pure: no API access.
type mapper struct {
	clusterID    string
	strategy     string
	offloadedBy  string // value of LabelOffloadedBy
	stripNodeSel bool
	stripAff     bool
	stripTol     bool
	hostIP       string // the virtual node's InternalIP, reported as hostIP
	nodeName     string // the virtual node's name
}

func newMapper(cfg Config, nodeName, hostIP string) *mapper {
	return &mapper{
		clusterID:    cfg.ClusterID,
		strategy:     cfg.NamespaceStrategy,
		offloadedBy:  truncateName(cfg.ClusterID+"."+nodeName, maxLabelValue),
		stripNodeSel: cfg.StripNodeSelector,
		stripAff:     cfg.StripAffinity,
		stripTol:     cfg.StripTolerations,
		hostIP:       hostIP,
		nodeName:     nodeName,
	}
}

// targetNamespace is the target namespace of source namespace ns.
func (m *mapper) targetNamespace(ns string) string {
	if m.strategy == NamespaceSame {
		return ns
	}
	return truncateName(ns+"-"+m.clusterID, maxLabelValue)
}

// selector selects the target objects of this provider.
func (m *mapper) selector() string { return LabelOffloadedBy + "=" + m.offloadedBy }

// originKey is "ns/name" of the source pod a target object belongs to, "" if the
// object is not ours.
func (m *mapper) originKey(obj metav1.Object) string {
	if obj.GetLabels()[LabelOffloadedBy] != m.offloadedBy {
		return ""
	}
	a := obj.GetAnnotations()
	if a[AnnotationOriginNamespace] == "" || a[AnnotationOriginName] == "" {
		return ""
	}
	return providerutil.PodKey(a[AnnotationOriginNamespace], a[AnnotationOriginName])
}

// ownMeta is the metadata of a target object derived from source pod src.
func (m *mapper) ownMeta(src *corev1.Pod, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: m.targetNamespace(src.Namespace),
		Labels: map[string]string{
			LabelOffloadedBy: m.offloadedBy,
			LabelOriginUID:   string(src.UID),
		},
		Annotations: map[string]string{
			AnnotationOriginCluster:   m.clusterID,
			AnnotationOriginNamespace: src.Namespace,
			AnnotationOriginName:      src.Name,
			AnnotationOriginUID:       string(src.UID),
		},
	}
}

// isTokenVolume says whether v is the service-account token volume the
// ServiceAccount admission plugin adds (kube-api-access-*): the target gets none.
func isTokenVolume(v corev1.Volume) bool {
	return strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil
}

// targetPod is the target pod for source pod src: metadata recording its origin,
// spec without what makes no sense remotely. Volumes and env are rewritten by the
// caller (see deps.go).
func (m *mapper) targetPod(src *corev1.Pod) *corev1.Pod {
	meta := m.ownMeta(src, src.Name)
	for k, v := range src.Labels {
		if _, ours := meta.Labels[k]; !ours {
			meta.Labels[k] = v
		}
	}
	for k, v := range src.Annotations {
		if _, ours := meta.Annotations[k]; !ours {
			meta.Annotations[k] = v
		}
	}
	spec := *src.Spec.DeepCopy()
	spec.NodeName = ""
	spec.ServiceAccountName, spec.DeprecatedServiceAccount = "", ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.PriorityClassName, spec.Priority, spec.PreemptionPolicy = "", nil, nil
	spec.ReadinessGates = nil
	spec.SchedulingGates = nil
	spec.EphemeralContainers = nil
	if m.stripNodeSel {
		spec.NodeSelector = nil
	}
	// Terms that pinned the pod to the virtual node mean nothing in the target.
	if spec.NodeSelector["kubernetes.io/hostname"] == m.nodeName {
		delete(spec.NodeSelector, "kubernetes.io/hostname")
	}
	if spec.NodeSelector["type"] == "virtual-kubelet" {
		delete(spec.NodeSelector, "type")
	}
	if len(spec.NodeSelector) == 0 {
		spec.NodeSelector = nil
	}
	if m.stripAff {
		spec.Affinity = nil
	} else {
		spec.Affinity = m.unpinnedAffinity(spec.Affinity)
	}
	if m.stripTol {
		spec.Tolerations = nil
	}
	dropped := map[string]bool{}
	vols := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if isTokenVolume(v) {
			dropped[v.Name] = true
			continue
		}
		vols = append(vols, v)
	}
	spec.Volumes = vols
	dropMounts := func(cs []corev1.Container) {
		for i := range cs {
			ms := cs[i].VolumeMounts[:0]
			for _, vm := range cs[i].VolumeMounts {
				if !dropped[vm.Name] {
					ms = append(ms, vm)
				}
			}
			cs[i].VolumeMounts = ms
		}
	}
	dropMounts(spec.InitContainers)
	dropMounts(spec.Containers)
	return &corev1.Pod{ObjectMeta: meta, Spec: spec}
}

// unpinnedAffinity is a (a deep copy, which it may change) without the node
// affinity terms that select the virtual node by name (kubernetes.io/hostname
// or metadata.name In a list naming it), as the Kubernetes e2e framework and
// DaemonSets pin pods to a node: the virtual node stands for the whole target,
// so in the target such a requirement is met by any node. A required term left
// with no requirement selected the virtual node alone, so every target node
// meets the required affinity; a preferred term left empty prefers nothing.
// Other terms are kept as they are.
func (m *mapper) unpinnedAffinity(a *corev1.Affinity) *corev1.Affinity {
	if a == nil || a.NodeAffinity == nil {
		return a
	}
	pins := func(r corev1.NodeSelectorRequirement, key string) bool {
		return r.Key == key && r.Operator == corev1.NodeSelectorOpIn && slices.Contains(r.Values, m.nodeName)
	}
	unpin := func(t corev1.NodeSelectorTerm) (corev1.NodeSelectorTerm, bool) {
		exprs := slices.DeleteFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return pins(r, corev1.LabelHostname) })
		fields := slices.DeleteFunc(t.MatchFields, func(r corev1.NodeSelectorRequirement) bool { return pins(r, "metadata.name") })
		changed := len(exprs) != len(t.MatchExpressions) || len(fields) != len(t.MatchFields)
		return corev1.NodeSelectorTerm{MatchExpressions: exprs, MatchFields: fields}, changed
	}
	na := a.NodeAffinity
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		for i, t := range req.NodeSelectorTerms {
			u, changed := unpin(t)
			if changed && len(u.MatchExpressions)+len(u.MatchFields) == 0 {
				na.RequiredDuringSchedulingIgnoredDuringExecution = nil
				break
			}
			req.NodeSelectorTerms[i] = u
		}
	}
	prefs := na.PreferredDuringSchedulingIgnoredDuringExecution[:0]
	for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		u, changed := unpin(p.Preference)
		if changed && len(u.MatchExpressions)+len(u.MatchFields) == 0 {
			continue
		}
		p.Preference = u
		prefs = append(prefs, p)
	}
	na.PreferredDuringSchedulingIgnoredDuringExecution = prefs
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(prefs) == 0 {
		a.NodeAffinity = nil
		if a.PodAffinity == nil && a.PodAntiAffinity == nil {
			return nil
		}
	}
	return a
}

// sourcePod is the target pod t as the source knows it: origin namespace, name and
// UID, the source's view of the spec if known, and t's status mapped back.
func (m *mapper) sourcePod(t *corev1.Pod, last *corev1.Pod) *corev1.Pod {
	a := t.Annotations
	p := &corev1.Pod{}
	if last != nil {
		p.ObjectMeta = *last.ObjectMeta.DeepCopy()
		p.Spec = *last.Spec.DeepCopy()
	} else {
		p.Spec = *t.Spec.DeepCopy()
		p.Labels = map[string]string{}
		for k, v := range t.Labels {
			if k != LabelOffloadedBy && k != LabelOriginUID {
				p.Labels[k] = v
			}
		}
	}
	p.Namespace, p.Name, p.UID = a[AnnotationOriginNamespace], a[AnnotationOriginName], types.UID(a[AnnotationOriginUID])
	p.Status = *m.sourceStatus(t)
	return p
}

// sourceStatus maps the status of target pod t back: everything but hostIP, which
// is the virtual node's address when known, and the generations observed, which
// count the target pod's changes, not the source pod's (the node agent writes
// the source pod's own).
func (m *mapper) sourceStatus(t *corev1.Pod) *corev1.PodStatus {
	s := t.Status.DeepCopy()
	s.NominatedNodeName = ""
	s.ObservedGeneration = 0
	for i := range s.Conditions {
		s.Conditions[i].ObservedGeneration = 0
	}
	if s.Phase == "" {
		s.Phase = corev1.PodPending
	}
	if m.hostIP != "" {
		s.HostIP = m.hostIP
		s.HostIPs = []corev1.HostIP{{IP: m.hostIP}}
	}
	return s
}

// deletedStatus is the status reported for a pod whose target pod was deleted
// behind the provider's back and is not re-created (restartPolicy Never).
func deletedStatus(last *corev1.PodStatus) *corev1.PodStatus {
	const reason = "TargetPodDeleted"
	msg := "the pod was deleted from the target cluster"
	s := &corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: msg}
	if last != nil {
		s.StartTime = last.StartTime
		s.PodIP, s.PodIPs, s.HostIP, s.HostIPs = last.PodIP, last.PodIPs, last.HostIP, last.HostIPs
		for _, cs := range last.ContainerStatuses {
			if cs.State.Terminated == nil {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: reason, Message: msg,
				}}
			}
			cs.Ready, cs.Started = false, ptr.To(false)
			s.ContainerStatuses = append(s.ContainerStatuses, cs)
		}
	}
	return s
}

func describe(p *corev1.Pod) string { return providerutil.PodKey(p.Namespace, p.Name) }

// noTarget is the NotFound of the contract for source pod key ("namespace/name")
// when it has no pod in the target cluster.
func noTarget(key string) error {
	return errdefs.NotFound("pod %s has no pod in the target cluster", key)
}
