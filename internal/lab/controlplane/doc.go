// Package controlplane builds, starts and stops a real Kubernetes control plane on
// loopback: etcd, kube-apiserver and, when asked, kube-scheduler and
// kube-controller-manager; and metrics-server (StartMetricsServer), as an aggregated
// API on an address of the caller's choosing. It also builds, but does not run, kwok
// (EnsureKwok), the node simulator `vkubeletctl bench --compare kwok` measures, helm
// (EnsureHelm), and kube-proxy (Binaries.KubeProxy) and CoreDNS (EnsureCoreDNS) for
// the cluster networking of CRI pods.
//
// The binaries are compiled from pinned versions through the Go module proxy (see
// buildmod/) and cached outside the repository, so the first use takes minutes and
// every later one takes a second. Every process lives in its own process group and
// dies with its parent, so a killed test leaves nothing behind, and each control plane
// takes its own free ports and state directory, so several can run side by side.
//
// It is used by the integration tests (through internal/lab/testenv), by
// `vkubeletctl up` and by `vkubeletctl bench`, never by the node's binary. It is not
// a general cluster installer: it has no networking, no kubelets and no high
// availability.
package controlplane
