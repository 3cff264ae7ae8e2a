package controlplane

import (
	"context"
	"io"
	"path/filepath"
)

// VirtualKubeletVersion is upstream virtual-kubelet's, the version of the library
// vkubelet's adapter (package upstream) runs providers of; it must match
// buildmod/virtual-kubelet/go.mod.txt.
const VirtualKubeletVersion = "v1.14.1"

// upstreamVirtualKubelet is upstream virtual-kubelet's own command, its engine
// with its mock provider, which `vkubeletctl bench --upstream` measures next to
// the same mock on vkubelet's engine; only EnsureUpstreamVirtualKubelet builds it.
var upstreamVirtualKubelet = component{
	name:     "virtual-kubelet",
	version:  VirtualKubeletVersion,
	packages: []string{"github.com/virtual-kubelet/virtual-kubelet/cmd/virtual-kubelet"},
	ldflags:  "-s -w",
}

// EnsureUpstreamVirtualKubelet returns the path of upstream's virtual-kubelet
// command, building it first if the cache lacks it, with the progress reporting
// and locking of EnsureBinaries.
func EnsureUpstreamVirtualKubelet(ctx context.Context, out io.Writer) (string, error) {
	dir, err := ensureCached(ctx, upstreamVirtualKubelet, out)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "virtual-kubelet"), nil
}
