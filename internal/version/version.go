// Package version holds vkubelet's version, set at build time with
// -ldflags "-X github.com/vkubelet/vkubelet/internal/version.Version=v0.1.0".
package version

// Version of vkubelet; "dev" for builds without ldflags.
var Version = "dev"

// KubernetesVersion is the Kubernetes API version vkubelet is built against (its
// client-go) and speaks as a kubelet.
const KubernetesVersion = "v1.37.1"

// KubeletVersion is what the node reports in status.nodeInfo.kubeletVersion: the
// Kubernetes version, so version-skew checks see a kubelet of the right minor, with
// vkubelet's own version as a suffix.
func KubeletVersion() string { return KubernetesVersion + "-vkubelet-" + Version }
