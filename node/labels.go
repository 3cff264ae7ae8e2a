package node

import (
	"slices"
	"strings"

	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// This file holds which labels a node may set on itself. Under its own identity
// (system:node:<name>) the NodeRestriction admission plugin refuses a Node that
// carries a label in the kubernetes.io or k8s.io namespaces (or their
// subdomains) that is not one of the kubelet's own; the whole write is refused,
// so one such label would keep the node from registering at all.

// refusedToNodes reports whether NodeRestriction refuses the label key on a
// Node written by the node itself.
func refusedToNodes(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	reserved := ns == "kubernetes.io" || ns == "k8s.io" || strings.HasSuffix(ns, ".kubernetes.io") || strings.HasSuffix(ns, ".k8s.io")
	return reserved && !kubeletapis.IsKubeletLabel(key)
}

// dropRefusedLabels removes from labels those a node may not set on itself and
// returns their keys, sorted.
func dropRefusedLabels(labels map[string]string) []string {
	dropped := refusedLabels(labels)
	for _, k := range dropped {
		delete(labels, k)
	}
	return dropped
}

// refusedLabels lists the keys of labels a node may not set on itself, sorted.
func refusedLabels(labels map[string]string) []string {
	var out []string
	for k := range labels {
		if refusedToNodes(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
