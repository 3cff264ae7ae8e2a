package controlplane

import (
	"context"
	"io"
	"path/filepath"
)

// InterLinkVersion is interLink's (github.com/interlink-hq/interlink), the
// module whose virtual kubelet the adapter's tests run on vkubelet and whose
// API server they run it against; it must match buildmod/interlink-api/go.mod.txt.
const InterLinkVersion = "v0.0.0-20250722085031-9ed14a4e89d5"

// interLinkAPI is interLink's API server (cmd/interlink), which sits between
// interLink's virtual kubelet and a plugin; only EnsureInterLinkAPI builds it.
// It has a build module of its own: it needs the Kubernetes libraries of its
// own module's version (k8s.io/cri-api v0.33, which later versions changed
// incompatibly), not vkubelet's.
var interLinkAPI = component{
	name:     "interlink-api",
	version:  InterLinkVersion,
	packages: []string{"github.com/interlink-hq/interlink/cmd/interlink"},
	ldflags:  "-s -w",
}

// EnsureInterLinkAPI returns the path of interLink's API server, building it
// first if the cache lacks it, with the progress reporting and locking of
// EnsureBinaries.
func EnsureInterLinkAPI(ctx context.Context, out io.Writer) (string, error) {
	dir, err := ensureCached(ctx, interLinkAPI, out)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "interlink"), nil
}
