// Package provider is the contract between vkubelet and a back end that runs pods.
//
// A provider implements PodLifecycleHandler and, where it can, any of the optional
// interfaces in this package; the controllers and the kubelet API discover those by
// type assertion and fall back to polling (status) or a clear "not implemented"
// answer (logs, exec, …) when they are absent.
//
// The package imports nothing of vkubelet but errdefs. It is called by the node
// controller, the pod controller and the kubelet API, and implemented by the packages
// under providers/. A provider never talks to the Kubernetes API server of the node
// it serves: everything it needs arrives through these methods.
package provider
