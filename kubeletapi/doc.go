// Package kubeletapi serves the kubelet's HTTPS API for a virtual node: container
// logs, exec, attach, port-forward, stats, resource metrics, the pod list and health,
// on the paths and with the query parameters of the kubelet, so the API server can
// proxy `kubectl logs/exec/attach/port-forward/top` to the node.
//
// Every route calls an optional provider interface (package provider); a provider
// without it gets 501 Not Implemented. Provider errors map to HTTP statuses by class:
// NotFound 404, InvalidInput 400, NotImplemented 501, others 500.
//
// Requests are authenticated (client certificates against a CA, bearer tokens through
// TokenReview) and authorized (SubjectAccessReview on nodes/<name> with the kubelet's
// subresources: stats, metrics, log, proxy) as the kubelet does, with cached
// decisions; anonymous callers get 401 and forbidden ones 403. Streaming (SPDY and
// WebSocket) is done by k8s.io/cri-streaming, the library the kubelet's runtimes use.
//
// The TLS certificate comes from package internal/identity. The package is wired
// into a node by internal/process/agent; it knows the provider contract only.
package kubeletapi
