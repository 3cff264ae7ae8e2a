// Package node registers the virtual node with the API server and keeps it alive.
//
// The Controller creates the Node (labels, provider taint, capacity, addresses,
// nodeInfo, default conditions) or merges those into an existing one, renews the
// node's Lease in kube-node-lease while the provider answers Ping, writes the status
// the provider reports through NotifyNodeStatus, and registers the node again if
// someone deletes it, unless it was marked for removal (RemovalAnnotation, set by
// `vkubelet remove-node`; removal.go): then it stops writing the Node and its Lease. Every write to the Node is a patch of the keys vkubelet owns:
// labels, annotations, taints and conditions written by others survive.
//
// It is not the pod controller and knows nothing about pods; it knows the provider
// only through the provider package's NodeProvider and NodeConfigurer contracts.
// Decisions (the node to register, the patches to send, the lease to write) are pure
// functions of state and of an injected clock, so they are tested without sleeping.
//
// It is called by the wiring in cmd/: build a Controller with NewController, run it
// with Run, and wait on Ready before serving pods.
package node
