package e2econformance

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// This file makes the e2e tests' images on this machine, without a container
// daemon or an outside registry, and pushes them to the cluster's local registry
// (the one crienv runs for `vkubeletctl up --provider cri`). The suite finds them
// there through KUBE_TEST_REPO_LIST, which moves each of its registries
// (registry.k8s.io/e2e-test-images, registry.k8s.io, ...) under the local one.

// TestImage is one image of the e2e suite's manifest
// (k8s.io/kubernetes/test/utils/image), under its original name.
type TestImage struct {
	// Path is the image's repository below its registry and its tag, as
	// e2e.test --list-images prints it after the registry: e2e-test-images/agnhost:2.66.1.
	Path string
	// How says how it is made here, or why it cannot be; empty for images the
	// run does not need.
	How string
	// Unavailable is set when the image cannot be made here: the tests that
	// pull it are reported "image unavailable".
	Unavailable bool
}

// testImages are the images the run makes, with what stands in for each image's
// own build, and the images of the suite it cannot make (the others are
// reported unavailable too, by Unavailable, since the suite finds only what the
// run pushed). Tags are those of KubernetesVersion's manifest; they must follow
// it when the version changes (e2e.test --list-images prints them).
var testImages = []TestImage{
	{Path: "e2e-test-images/busybox:1.37.0-2", How: "Debian's busybox-static, as the CRI tests' busybox (crienv)"},
	{Path: "e2e-test-images/busybox:1.36.1-1", How: "the same busybox-static as 1.37.0-2"},
	{Path: "e2e-test-images/agnhost:2.66.1", How: "agnhost built from k8s.io/kubernetes/test/images/agnhost at the control plane's version, on busybox-static instead of Alpine: bash is busybox sh, curl a busybox wget for a plain GET; no dig, iperf, socat, coredns"},
	{Path: "e2e-test-images/agnhost:2.55", How: "the same agnhost as 2.66.1: the earlier release cannot be built from this module"},
	{Path: "pause:3.10.2", How: "a Go pause (exits on SIGTERM/SIGINT, reaps orphans) from the e2e build module; the pods' sandbox image stays crienv's"},
	{Path: "e2e-test-images/nonroot:1.5", How: "busybox-static run as user 1234, as its Dockerfile"},
	{Path: "e2e-test-images/nonewprivs:1.4", How: "nonewprivs built from k8s.io/kubernetes/test/images/nonewprivs, setuid root at /usr/local/bin/nnp on busybox-static, as its Dockerfile"},
}

// unavailableImages are the suite's images (e2e.test --list-images) that cannot
// be made here, by repository, with why.
var unavailableImages = map[string]string{
	"e2e-test-images/nginx":                  "nginx from Alpine's packages: no package repository or outside registry is reachable",
	"e2e-test-images/perl":                   "a Perl distribution on Debian",
	"e2e-test-images/glibc-dns-testing":      "a glibc-based image",
	"e2e-test-images/sample-apiserver":       "the sample API server's image (not built yet)",
	"e2e-test-images/volume/nfs":             "an NFS server image",
	"e2e-test-images/volume/iscsi":           "an iSCSI target image",
	"e2e-test-images/regression-issue-74839": "not built yet (a Go program of test/images)",
	"e2e-test-images/kitten":                 "a web page image of its own (not built yet)",
	"e2e-test-images/nautilus":               "a web page image of its own (not built yet)",
	"e2e-test-images/ipc-utils":              "not built yet",
	"e2e-test-images/apparmor-loader":        "AppArmor tests are outside the selection",
	"e2e-test-images/sample-device-plugin":   "device plugins are outside the selection",
	"e2e-test-images/node-perf":              "node performance workloads, outside the selection",
	"build-image/distroless-iptables":        "an iptables image",
	"etcd":                                   "an etcd image",
	"sig-storage":                            "CSI sidecars and drivers",
	"cloud-provider-gcp":                     "a cloud provider's CSI driver",
	"k8s-authenticated-test":                 "a private registry with credentials",
}

// RepoList is the suite's KUBE_TEST_REPO_LIST for a registry at host:port: every
// registry it knows moved under the local one, so that nothing is pulled from
// outside (what the run did not push fails at once, as not found). The invalid
// registry stays invalid: tests expect its pulls to fail.
func RepoList(registry string) string {
	keys := []struct{ key, path string }{
		{"promoterE2eRegistry", "e2e-test-images"},
		{"buildImageRegistry", "build-image"},
		{"gcEtcdRegistry", ""},
		{"gcRegistry", ""},
		{"sigStorageRegistry", "sig-storage"},
		{"privateRegistry", "k8s-authenticated-test"},
		{"dockerLibraryRegistry", "library"},
		{"cloudProviderGcpRegistry", "cloud-provider-gcp"},
	}
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k.key, strings.TrimSuffix(path.Join(registry, k.path), "/"))
	}
	return b.String()
}

// ImageUnavailable reports whether the image reference (as the suite names it,
// under any registry) is one of the suite's images that the run cannot make,
// and why.
func ImageUnavailable(ref string) (string, bool) {
	for _, t := range testImages {
		if strings.HasSuffix(ref, "/"+t.Path) {
			return "", false
		}
	}
	best := ""
	for repo := range unavailableImages {
		if strings.Contains(ref, "/"+repo) && len(repo) > len(best) {
			best = repo
		}
	}
	if best == "" {
		return "", false
	}
	return unavailableImages[best], true
}

// UnavailableImages lists the suite's images that the run cannot make, sorted,
// each with the reason.
func UnavailableImages() []TestImage {
	var out []TestImage
	for p, why := range unavailableImages {
		out = append(out, TestImage{Path: p, How: why, Unavailable: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// PushTestImages makes testImages and pushes them to registry (host:port, plain
// HTTP), starting from its busybox (busyboxRef, crienv's image) and the e2e
// build's binaries.
func PushTestImages(registry, busyboxRef string, bins *controlplane.E2E) error {
	bbRef, err := name.ParseReference(busyboxRef, name.Insecure)
	if err != nil {
		return err
	}
	busybox, err := remote.Image(bbRef)
	if err != nil {
		return fmt.Errorf("reading busybox from the local registry: %w", err)
	}
	agnhost, err := agnhostImage(busybox, bins.Agnhost)
	if err != nil {
		return err
	}
	pause, err := pauseImage(bins.Pause)
	if err != nil {
		return err
	}
	nonroot, err := withConfig(busybox, func(c *v1.Config) { c.User = "1234" })
	if err != nil {
		return err
	}
	nonewprivs, err := nonewprivsImage(busybox, bins.Nonewprivs)
	if err != nil {
		return err
	}
	images := map[string]v1.Image{
		"e2e-test-images/busybox:1.37.0-2": busybox,
		"e2e-test-images/busybox:1.36.1-1": busybox,
		"e2e-test-images/nonewprivs:1.4":   nonewprivs,
		"e2e-test-images/agnhost:2.66.1":   agnhost,
		"e2e-test-images/agnhost:2.55":     agnhost,
		"pause:3.10.2":                     pause,
		"e2e-test-images/nonroot:1.5":      nonroot,
	}
	for p, img := range images {
		ref, err := name.ParseReference(registry+"/"+p, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	return nil
}

// agnhostImage is agnhost's image as its Dockerfile makes it, on busybox: the
// binary at /agnhost (also as /agnhost-2), an /uploads directory, and the user
// and group the image defines (tests check that a pod runs as them); bash and
// curl are busybox's sh and wget behind scripts of those names.
func agnhostImage(base v1.Image, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	passwd := baseFile(base, "etc/passwd") +
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
	group := baseFile(base, "etc/group") + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
	layer, err := layerOf([]file{
		// Alpine's bash and curl, which the tests' commands call, stood in
		// for by busybox: sh for bash, wget for curl's plain GET of a URL.
		{name: "bin/bash", mode: 0o755, data: []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n")},
		{name: "usr/", mode: 0o755},
		{name: "usr/bin/", mode: 0o755},
		{name: "usr/bin/curl", mode: 0o755, data: []byte("#!/bin/sh\nexec /bin/wget -q -O - \"$@\"\n")},
		{name: "agnhost", mode: 0o755, data: bin},
		{name: "agnhost-2", link: "agnhost"},
		{name: "uploads/", mode: 0o755},
		{name: "home/user-defined-in-image/", mode: 0o755, uid: 1000},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) {
		c.Entrypoint, c.Cmd = []string{"/agnhost"}, []string{"pause"}
		c.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	})
}

// nonewprivsImage is nonewprivs's image as its Dockerfile makes it: the program
// setuid root at /usr/local/bin/nnp, its command.
func nonewprivsImage(base v1.Image, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := layerOf([]file{
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/nnp", mode: 0o4755, data: bin},
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) { c.Cmd = []string{"nnp"}; c.Env = []string{"PATH=/usr/local/bin:/bin"} })
}

// pauseImage is the binary alone at /pause, its entrypoint.
func pauseImage(binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := layerOf([]file{{name: "pause", mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) { c.Entrypoint = []string{"/pause"} })
}

// withConfig returns img with its configuration changed by edit, for linux/amd64.
func withConfig(img v1.Image, edit func(*v1.Config)) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	edit(&cf.Config)
	return mutate.ConfigFile(img, cf)
}

// baseFile is a file of img's filesystem, or "" if it has none.
func baseFile(img v1.Image, name string) string {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if strings.TrimPrefix(h.Name, "/") == name {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

// file is one entry of a layer: a directory (name ends in /), a symbolic link
// (link set) or a regular file.
type file struct {
	name string
	mode int64
	uid  int
	data []byte
	link string
}

// layerOf is a layer holding files, each with the Unix epoch as its time so that
// the layer's digest depends on the contents alone.
func layerOf(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: epoch}
		switch {
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag = tar.TypeDir
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
