// Package image builds vkubelet's container image without a container daemon, the
// way ko does: a static vkubelet binary on an otherwise empty root filesystem (no
// shell, no package manager), run as the unprivileged user 65532. The image is
// assembled with go-containerregistry and written as an OCI image layout in a tar
// archive, which `ctr images import` loads and `crane push` (or any OCI tool)
// pushes to a registry.
//
// One commit gives one digest: the binary is built with -trimpath, every file of
// the layer has the same owner and a fixed time, and the image's creation time is
// the commit's (SOURCE_DATE_EPOCH), not the time of the build.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultRepository is where the image is published; the chart's default.
const DefaultRepository = "ghcr.io/vkubelet/vkubelet"

// NonRoot is the user and group the image runs as (distroless's "nonroot").
const NonRoot = 65532

// Binary is where the image keeps vkubelet; it is the entrypoint.
const Binary = "/vkubelet"

// StateDir is a directory the non-root user owns, for the node's certificates
// (--cert-dir) and a provider's state when no volume is mounted there.
const StateDir = "/var/lib/vkubelet"

// Options say what to build.
type Options struct {
	// ModuleDir is the root of vkubelet's Go module.
	ModuleDir string
	// Version is written into the binary (`vkubelet version`) and is the image's tag.
	Version string
	// Revision is the commit, recorded as a label; optional.
	Revision string
	// Created is the image's creation time: the commit's, so that builds of one
	// commit agree.
	Created time.Time
	// Arch is the GOARCH to build for; empty means amd64.
	Arch string
	// Log receives the build's output; nil discards it.
	Log io.Writer
}

// Build compiles a static vkubelet for linux and returns its image.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	tmp, err := os.MkdirTemp("", "vkubelet-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "vkubelet")
	if err := Compile(ctx, o, bin); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return FromBinary(data, o)
}

// Compile builds the static vkubelet for linux/o.Arch at path: trimmed paths,
// no symbol tables, the version, commit and the commit's time written in
// (`vkubelet version`), so that one commit builds the same binary anywhere.
func Compile(ctx context.Context, o Options, path string) error {
	if o.Version == "" {
		return fmt.Errorf("image: a version is needed (it is the tag)")
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	const pkg = "github.com/vkubelet/vkubelet/internal/version."
	ldflags := "-s -w -X " + pkg + "Version=" + o.Version
	if o.Revision != "" {
		ldflags += " -X " + pkg + "Commit=" + o.Revision
	}
	if !o.Created.IsZero() && o.Created.Unix() != 0 {
		ldflags += " -X " + pkg + "Date=" + o.Created.UTC().Format(time.RFC3339)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", path, "./cmd/vkubelet")
	cmd.Dir = o.ModuleDir
	// Static: the image has no C library. GOFLAGS of the caller (-race from a test
	// run, say) must not reach this build.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch, "GOFLAGS=", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("image: go build for linux/%s: %w\n%s", o.Arch, err, out.String())
	}
	if o.Log != nil {
		_, _ = o.Log.Write(out.Bytes())
	}
	return nil
}

// FromBinary returns the image around an already built static binary.
func FromBinary(binary []byte, o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	layerData, err := rootFS(binary, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created.UTC()}
	cf.Config.Entrypoint = []string{Binary}
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/", "HOME=" + StateDir}
	labels := map[string]string{
		"org.opencontainers.image.title":   "vkubelet",
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.source":  "https://github.com/vkubelet/vkubelet",
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	cf.Config.Labels = labels
	// The layer's history entry says what made it, with the same fixed time.
	cf.History = []v1.History{{Created: cf.Created, CreatedBy: "vkubelet internal/lab/image: static binary " + Binary}}
	return mutate.ConfigFile(img, cf)
}

// rootFS is the image's only layer: the binary, the user database naming the
// non-root user, a writable /tmp and the state directory. Every entry has the
// same time, so the layer's digest depends on the binary alone.
func rootFS(binary []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC()
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", NonRoot, NonRoot, StateDir))
		},
		func() error { return file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", NonRoot)) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/lib", 0o755, 0) },
		func() error { return dir(strings.TrimPrefix(StateDir, "/"), 0o700, NonRoot) },
		func() error { return file(strings.TrimPrefix(Binary, "/"), 0o755, binary) },
		tw.Close,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}
