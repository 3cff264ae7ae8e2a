// Package conformance runs Kubernetes' own end-to-end tests (e2e.test, built from
// the control plane's Kubernetes version by internal/lab/controlplane) against a
// vkubelet CRI node on this machine: it starts `vkubeletctl up --provider cri` as
// a child process, makes the tests' images here and pushes them to the cluster's
// local registry (no outside registry is reached), runs the selected tests, and
// reads their JUnit report into results, telling a failure from a test whose
// image cannot be made here.
//
// It is `vkubeletctl conformance` and `make conformance` (docs/CONFORMANCE.md);
// it is not part of `make test`, and the node's binary never links it.
package conformance
