// Package wirefixtures records, for each Kubernetes release the lab can run,
// the bytes its API server sends to the node's own decoders (internal/wire):
// a rich pod read, listed and watched in protobuf, the answer to a status
// patch, the pod with an ephemeral container, and TokenRequest answers in
// protobuf and JSON. They are written under internal/wire/testdata/releases/
// <version>/ with a manifest.json that says, for each file, the request it
// answers, and the wire packages' tests decode them with internal/wire and with
// client-go and compare: a release whose encoding our decoders misread fails
// `make test` without starting an API server.
//
// Record starts the release's control plane (etcd and kube-apiserver only);
// mkwirefixtures runs it for each release whose binaries are built. Load is
// the tests' side: it reads the manifests. It is a lab package: the node's
// binary never imports it.
package wirefixtures
