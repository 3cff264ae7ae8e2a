// Package apifeatures says which of the Kubernetes API features the node
// writes to the API server has: the rule of version skew, written once.
//
// vkubelet supports API servers from Floor (v1.30) on. Below it the node
// refuses to start, naming the floor; it refuses too when the server does not
// serve an API the node cannot do without (its Lease, pod and node statuses,
// TokenRequest, TokenReview, SubjectAccessReview). Between the floor and the
// newest release a feature the server lacks is one the node does without,
// writing a pod's or node's status as that release's kubelet does: a field
// the server would drop silently would be a silent difference, and the node,
// finding it missing from the API, would write it again at every status check.
//
// Detect reads the server's /version and discovery; Decide is the rule, a pure
// function of what they said; a Set answers Has. A nil *Set has every feature,
// as the newest release: what the controllers get from a caller that read
// nothing (their unit tests). The node's wiring (internal/process/agent) calls
// Detect once per process and API server, logs what is off and why, and hands
// the Set to the node and pod controllers. It is not read again while the node
// runs: a node picks up an upgraded API server when it restarts.
//
// Discovery shows an API or subresource, not a field: a feature that is a
// field behind a feature gate is judged by the server's release, from the
// first release whose default installation keeps what the node writes (the
// gates' histories are those of each release's pkg/features/kube_features.go,
// and the integration test checks the rule against the release it runs). An
// operator who turned a beta gate off against its default is not seen; a GA
// gate is locked on.
package apifeatures
