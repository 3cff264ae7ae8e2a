// Package skew runs the node's wire-facing end-to-end tests and a benchmark
// against each Kubernetes release the lab can build (controlplane.KubernetesVersions)
// and tabulates the outcome: `vkubeletctl skew`, `make skew`.
//
// The tests are the repository's own integration tests, run by `go test -json`
// with $VKUBELET_KUBERNETES_VERSION naming the release, so every control plane
// they start is that release's (its kubectl and kube-proxy included). A test that
// needs what a release lacks skips itself, saying what it needs (testenv.
// RequireKubernetes); the matrix counts it as not applicable. CI=true is set so
// that a missing part of the machine fails instead of skipping.
package skew
