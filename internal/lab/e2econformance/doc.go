// Package e2econformance runs Kubernetes' own end-to-end tests (e2e.test, built from
// the control plane's Kubernetes version by internal/lab/controlplane) against a
// vkubelet CRI node on this machine: it starts `vkubeletctl up --provider cri` as
// a child process, makes the tests' images here and pushes them to the cluster's
// local registry (no outside registry is reached), runs the selected tests, and
// reads their JUnit report into results, telling a failure from a test whose
// image cannot be made here. The same tests may then run on a real kubelet joined
// to the cluster (kubelet.go) and on a vkubelet node whose kube provider offloads
// to a second cluster (kube.go), each a column of the comparison (compare.go).
//
// It is `vkubeletctl conformance` and `make conformance` (docs/CONFORMANCE.md);
// it is not part of `make test`, and the node's binary never links it.
package e2econformance
