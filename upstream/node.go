package upstream

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// seedNode is the Node an upstream provider is handed in its ProviderConfig to
// configure, as nodeutil.NewNode hands it one: named, with empty label and
// annotation maps (providers write into them) and the node's address if known.
// What the provider sets on it is carried onto vkubelet's node by ConfigureNode.
func seedNode(name, internalIP string) *corev1.Node {
	n := &corev1.Node{}
	n.Name = name
	n.Labels, n.Annotations = map[string]string{}, map[string]string{}
	if internalIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	}
	return n
}

// configureFrom carries onto n what an upstream provider set on its seed node:
// labels, annotations and taints added, providerID and pod CIDRs, capacity and
// allocatable, conditions and addresses (by type) and node info. The kubelet
// endpoint's port is left alone: vkubelet binds the port and advertises it, where
// upstream's providers were told it only to write it back.
func configureFrom(n, from *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range from.Labels {
		n.Labels[k] = v
	}
	if len(from.Annotations) > 0 && n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range from.Annotations {
		n.Annotations[k] = v
	}
	for _, t := range from.Spec.Taints {
		if !slices.ContainsFunc(n.Spec.Taints, func(o corev1.Taint) bool { return o.Key == t.Key && o.Effect == t.Effect }) {
			n.Spec.Taints = append(n.Spec.Taints, t)
		}
	}
	if from.Spec.ProviderID != "" {
		n.Spec.ProviderID = from.Spec.ProviderID
	}
	if from.Spec.PodCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = from.Spec.PodCIDR, slices.Clone(from.Spec.PodCIDRs)
	}
	if len(from.Status.Capacity) > 0 {
		n.Status.Capacity = from.Status.Capacity.DeepCopy()
	}
	if len(from.Status.Allocatable) > 0 {
		n.Status.Allocatable = from.Status.Allocatable.DeepCopy()
	}
	for _, c := range from.Status.Conditions {
		i := slices.IndexFunc(n.Status.Conditions, func(o corev1.NodeCondition) bool { return o.Type == c.Type })
		if i < 0 {
			n.Status.Conditions = append(n.Status.Conditions, *c.DeepCopy())
		} else {
			n.Status.Conditions[i] = *c.DeepCopy()
		}
	}
	// Addresses by type: the provider's InternalIP replaces vkubelet's, the
	// Hostname it did not set stays.
	for _, a := range from.Status.Addresses {
		n.Status.Addresses = slices.DeleteFunc(n.Status.Addresses, func(o corev1.NodeAddress) bool { return o.Type == a.Type })
	}
	n.Status.Addresses = append(n.Status.Addresses, from.Status.Addresses...)
	info, set := &n.Status.NodeInfo, from.Status.NodeInfo
	for _, f := range []struct {
		to *string
		v  string
	}{
		{&info.MachineID, set.MachineID}, {&info.SystemUUID, set.SystemUUID}, {&info.BootID, set.BootID},
		{&info.KernelVersion, set.KernelVersion}, {&info.OSImage, set.OSImage},
		{&info.ContainerRuntimeVersion, set.ContainerRuntimeVersion}, {&info.KubeletVersion, set.KubeletVersion},
		{&info.OperatingSystem, set.OperatingSystem}, {&info.Architecture, set.Architecture},
	} {
		if f.v != "" {
			*f.to = f.v
		}
	}
}

// nodeConfigurer is the ConfigureNode of upstream's command-line providers (its
// cmd/virtual-kubelet Provider interface), which a pair given to Wrap may have.
type nodeConfigurer interface {
	ConfigureNode(ctx context.Context, n *corev1.Node)
}
