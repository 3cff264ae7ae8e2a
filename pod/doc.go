// Package pod is the pod controller of a virtual node: it hands the pods the scheduler
// binds to the node to the provider, and reports what the provider says back to the
// API server.
//
// A pod's path, file by file:
//
//   - enqueue.go: an informer filtered on spec.nodeName (podwatch.go, or the
//     process's shared watch, source.go), the provider's PodNotifier or polling,
//     and the resolver's reference changes put the pod's key on a queue
//     (workqueue.go: the sync, status, deletion and removal queues and their
//     workers).
//   - sync.go: the sync handler resolves the spec (package resolve) and creates
//     or updates the pod in the provider, or refreshes its volumes; a spec that
//     cannot be resolved is reported the kubelet's way. providercalls.go makes
//     the calls into the provider, counted and traced, and reports a failed
//     one, or a pod the provider lost, in an Event and the pod's status.
//   - status.go: the status handler reads the provider's status and writes it
//     through writeStatus, the one writer of a pod's status (a strategic-merge
//     patch of the status subresource that keeps others' fields); statusEcho
//     tells our own writes coming back through the watch from others' changes.
//     statusmerge.go merges the provider's status into the API's.
//   - delete.go: once a deletion is requested, DeletePod; once the provider
//     confirms the pod stopped (at most one copy of a pod: it stays
//     Terminating until then, unless RemoveUnconfirmedAfter bounds the wait),
//     removal from the API, a stage of its own (removeHandler, on the removal
//     queue).
//   - reconcile.go: at start, what the provider already runs.
//
// The kubelet's rules the statuses follow are in files named for them:
// conditions.go (conditions worked out from container statuses), readiness.go
// (readiness gates), deadline.go (activeDeadlineSeconds), restarts.go (restart
// history), ephemeral.go, resize.go (in-place resize) and updatable.go (what a
// running pod may change). state.go is what the controller remembers per pod.
//
// Every handler is level-based: it reads the pod from the informer's cache and the
// provider's view, and makes them agree; the event that woke it only names the pod.
// Decisions that depend on time use an injected clock.
//
// The package knows the provider contract (package provider) and nothing of any
// concrete provider. It is wired up by internal/process/agent; it is not the node controller
// (package node), which registers the node and keeps its lease.
package pod
