package cri

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// This file holds the one part of a container's environment the provider
// settles itself: the pod's IP. The pod controller resolves the environment
// before the pod reaches the provider, when the pod has no sandbox and so no IP
// yet; the kubelet builds it once the sandbox exists. So the variables from
// status.podIP and status.podIPs, and those whose value refers to them with
// $(VAR), are set again here from the sandbox's IP before each container
// starts.

// podIPFields are the downward-API fields that are the pod's IPs.
var podIPFields = map[string]bool{"status.podIP": true, "status.podIPs": true}

// withPodIPs is env, the resolved environment of container c, with the
// variables that come from the pod's IPs (ips, the first the primary) set from
// them, in the kubelet's order: a variable's $(VAR) references see the
// variables declared before it. env is not changed; it is returned as it is
// when c refers to no pod IP or ips is empty.
func withPodIPs(c *corev1.Container, env []corev1.EnvVar, ips []string) []corev1.EnvVar {
	if len(ips) == 0 || !refersToPodIP(c) {
		return env
	}
	resolved := make(map[string]string, len(env))
	for _, e := range env {
		resolved[e.Name] = e.Value
	}
	declared := map[string]bool{}
	for _, ev := range c.Env {
		declared[ev.Name] = true
	}
	// cur is the environment as the container's own variables are set in
	// turn: it starts with what they do not set (envFrom, service variables).
	cur := map[string]string{}
	for name, v := range resolved {
		if !declared[name] {
			cur[name] = v
		}
	}
	fromIP := map[string]bool{} // variables whose current value comes from ips
	for _, ev := range c.Env {
		v, ok := resolved[ev.Name]
		if !ok {
			continue // an optional reference that was missing: not set
		}
		switch {
		case ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && podIPFields[ev.ValueFrom.FieldRef.FieldPath]:
			v = ips[0]
			if ev.ValueFrom.FieldRef.FieldPath == "status.podIPs" {
				v = strings.Join(ips, ",")
			}
			fromIP[ev.Name] = true
		case ev.Value != "" && refersToAny(ev.Value, fromIP):
			v = expandWith(ev.Value, cur)
			fromIP[ev.Name] = true
		default:
			fromIP[ev.Name] = false
		}
		cur[ev.Name] = v
	}
	out := make([]corev1.EnvVar, len(env))
	for i, e := range env {
		if fromIP[e.Name] {
			e.Value = cur[e.Name]
		}
		out[i] = e
	}
	return out
}

// refersToPodIP reports whether one of c's variables comes from the pod's IPs.
func refersToPodIP(c *corev1.Container) bool {
	for _, ev := range c.Env {
		if ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && podIPFields[ev.ValueFrom.FieldRef.FieldPath] {
			return true
		}
	}
	return false
}

// refersToAny reports whether value has a $(VAR) reference to a variable
// marked in names.
func refersToAny(value string, names map[string]bool) bool {
	for name, marked := range names {
		if marked && strings.Contains(value, "$("+name+")") {
			return true
		}
	}
	return false
}

// expandWith expands the $(VAR) references of value from vars.
func expandWith(value string, vars map[string]string) string {
	env := make([]corev1.EnvVar, 0, len(vars))
	for name, v := range vars {
		env = append(env, corev1.EnvVar{Name: name, Value: v})
	}
	return providerutil.ExpandCommand([]string{value}, env)[0]
}
