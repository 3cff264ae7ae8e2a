// Package pod is the pod controller of a virtual node: it hands the pods the scheduler
// binds to the node to the provider, and reports what the provider says back to the
// API server.
//
// A pod's path: an informer filtered on spec.nodeName → the sync queue (spec
// resolution by package resolve, then create or update in the provider; volume
// refreshes when what a pod references changes) → the provider → PodNotifier or polling → the status queue
// (a strategic-merge patch of the status subresource that keeps others' fields) →
// and, once a deletion is requested, the deletion queue (DeletePod, then removal
// from the API once the provider confirms or the grace period has passed).
//
// Every handler is level-based: it reads the pod from the informer's cache and the
// provider's view, and makes them agree; the event that woke it only names the pod.
// Decisions that depend on time use an injected clock.
//
// The package knows the provider contract (package provider) and nothing of any
// concrete provider. It is wired up by internal/process/agent; it is not the node controller
// (package node), which registers the node and keeps its lease.
package pod
