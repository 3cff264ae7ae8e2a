package resolve

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// This file holds the downward API of environment variables: fieldRef (the pod's
// metadata, node name, host and pod IPs) and resourceFieldRef (a container's
// requests and limits, unset limits defaulting to the node's allocatable).

// fieldRef resolves a downward-API field of the pod, as the kubelet's
// podFieldSelectorRuntimeValue and fieldpath.ExtractFieldPathAsString do.
func (r *resolution) fieldRef(fs *corev1.ObjectFieldSelector) (string, error) {
	p := r.pod
	path := fs.FieldPath
	if path == "spec.host" { // the kubelet's conversion of the old name
		path = "spec.nodeName"
	}
	switch path {
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		ips, err := r.hostIPs()
		if err != nil {
			return "", err
		}
		if path == "status.hostIP" {
			return ips[0], nil
		}
		return strings.Join(ips, ","), nil
	case "status.podIP":
		ips, err := r.podIPs()
		if err != nil || len(ips) == 0 {
			return "", err
		}
		return ips[0], nil
	case "status.podIPs":
		ips, err := r.podIPs()
		return strings.Join(ips, ","), err
	}
	return metadataField(p, path)
}

// metadataField is the kubelet's fieldpath.ExtractFieldPathAsString for the
// metadata fields the downward API allows.
func metadataField(p *corev1.Pod, path string) (string, error) {
	if sub, key, ok := splitMapKey(path); ok {
		switch sub {
		case "metadata.labels":
			return p.Labels[key], nil
		case "metadata.annotations":
			return p.Annotations[key], nil
		}
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	}
	return "", fmt.Errorf("pod %s/%s: unsupported fieldPath %q", p.Namespace, p.Name, path)
}

// splitMapKey splits "metadata.labels['key']" into "metadata.labels" and "key".
func splitMapKey(path string) (string, string, bool) {
	i := strings.Index(path, "['")
	if i < 0 || !strings.HasSuffix(path, "']") {
		return "", "", false
	}
	return path[:i], path[i+2 : len(path)-2], true
}

// formatMap renders labels or annotations as the downward API does: key="value"
// lines (Go-quoted values), sorted by key, without a final newline.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// hostIPs are the node's addresses as the kubelet's GetNodeHostIPs picks them:
// InternalIPs before ExternalIPs; the first, then the first of the other family.
func (r *resolution) hostIPs() ([]string, error) {
	node, err := r.node()
	if err != nil {
		return nil, err
	}
	var all []net.IP
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == t {
				if ip := net.ParseIP(a.Address); ip != nil {
					all = append(all, ip)
				}
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("host IP unknown; known addresses of node %s: %v", node.Name, node.Status.Addresses)
	}
	out := []string{all[0].String()}
	first6 := all[0].To4() == nil
	for _, ip := range all[1:] {
		if (ip.To4() == nil) != first6 {
			out = append(out, ip.String())
			break
		}
	}
	return out, nil
}

// podIPs are the pod's addresses. The kubelet knows them from the sandbox it has just
// created; here they are known once the provider has reported them (so on the first
// CreatePod only for hostNetwork pods, which have the node's).
func (r *resolution) podIPs() ([]string, error) {
	var out []string
	for _, ip := range r.pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && r.pod.Status.PodIP != "" {
		out = []string{r.pod.Status.PodIP}
	}
	if len(out) == 0 && r.pod.Spec.HostNetwork {
		return r.hostIPs()
	}
	return out, nil
}

// resourceFieldRef resolves a container's resource for the downward API. Unset
// limits of cpu, memory and ephemeral-storage default to the node's allocatable, as
// the kubelet's defaultPodLimitsForDownwardAPI does.
func (r *resolution) resourceFieldRef(fs *corev1.ResourceFieldSelector, self *corev1.Container) (string, error) {
	c := self
	if fs.ContainerName != "" {
		c = findContainer(r.pod, fs.ContainerName)
		if c == nil {
			return "", fmt.Errorf("pod %s/%s: container %q of resourceFieldRef not found", r.pod.Namespace, r.pod.Name, fs.ContainerName)
		}
	}
	limits, err := r.defaultedLimits(c)
	if err != nil {
		return "", err
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	list, name, ok := strings.Cut(fs.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
	}
	var q resource.Quantity
	switch list {
	case "limits":
		q = limits[corev1.ResourceName(name)]
	case "requests":
		q = c.Resources.Requests[corev1.ResourceName(name)]
	default:
		return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
	}
	switch corev1.ResourceName(name) {
	case corev1.ResourceCPU:
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	if strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
}

// defaultedLimits are c's limits with unset (or zero) cpu, memory and
// ephemeral-storage limits taken from the node's allocatable.
func (r *resolution) defaultedLimits(c *corev1.Container) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		out[k] = v
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := out[name]; ok && !q.IsZero() {
			continue
		}
		node, err := r.node()
		if err != nil {
			return nil, err
		}
		if a, ok := node.Status.Allocatable[name]; ok {
			out[name] = a.DeepCopy()
		}
	}
	return out, nil
}

func findContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}
