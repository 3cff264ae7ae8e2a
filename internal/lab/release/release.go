// Package release makes a release of vkubelet from a checkout, as `make release`
// and the release workflow do on a tag: the node's binary for each platform
// with their checksums, an SPDX SBOM of what the binary links, the container
// image as a multi-platform index, and the Helm chart packaged; then, given a
// registry, it pushes the image, the SBOM (an artifact tagged <version>.sbom)
// and the chart (an OCI artifact) there. The same commit makes the same files
// and digests: binaries and images are reproducible (package image).
package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/vkubelet/vkubelet/internal/lab/image"
)

// DefaultPlatforms are the platforms a release is built for.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// Options say what to release and where to push it.
type Options struct {
	// ModuleDir is the checkout's root; Version the release's (v1.2.3), its tag.
	ModuleDir string
	Version   string
	// Revision is the commit; Created its time, for reproducible dates.
	Revision string
	Created  time.Time
	// Platforms to build for (default DefaultPlatforms), as os/arch.
	Platforms []string
	// Out is the directory the files are written to (created if needed).
	Out string
	// Registry, if set, is where the image (Registry/vkubelet), its SBOM and the
	// chart (Registry/charts/vkubelet) are pushed, e.g. ghcr.io/vkubelet or
	// 127.0.0.1:5000; PlainHTTP for a registry without TLS.
	Registry  string
	PlainHTTP bool
	// Helm is the helm command that packages and pushes the chart.
	Helm string
	// Log receives progress; nil discards it.
	Log io.Writer
}

// Result names what a release made.
type Result struct {
	Binaries  []string // Out/vkubelet-<os>-<arch>
	Checksums string   // Out/SHA256SUMS
	SBOM      string   // Out/vkubelet.spdx.json
	Image     string   // Out/vkubelet-image.tar: the index as an OCI layout
	Chart     string   // Out/vkubelet-<version>.tgz
	// IndexDigest is the image index's digest; with a registry, ImageRef,
	// SBOMRef and ChartRef are where they were pushed.
	IndexDigest v1.Hash
	ImageRef    string
	SBOMRef     string
	ChartRef    string
}

// Make builds the release into o.Out and, with a registry, pushes it.
func Make(ctx context.Context, o Options) (*Result, error) {
	if o.Version == "" || !strings.HasPrefix(o.Version, "v") {
		return nil, fmt.Errorf("release: version %q: a release's version is its tag, v<major>.<minor>.<patch>", o.Version)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	res := &Result{}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var sums strings.Builder
	for _, platform := range o.Platforms {
		goos, arch, ok := strings.Cut(platform, "/")
		if !ok || goos != "linux" {
			return nil, fmt.Errorf("release: platform %q: vkubelet is released for linux/<arch>", platform)
		}
		bin := filepath.Join(o.Out, "vkubelet-linux-"+arch)
		fmt.Fprintf(o.Log, "release: building %s\n", bin)
		imgOpts := image.Options{ModuleDir: o.ModuleDir, Version: o.Version, Revision: o.Revision, Created: o.Created, Arch: arch, Log: o.Log}
		if err := image.Compile(ctx, imgOpts, bin); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), filepath.Base(bin))
		img, err := image.FromBinary(data, imgOpts)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: goos, Architecture: arch}}})
		res.Binaries = append(res.Binaries, bin)
		if res.SBOM == "" { // the platforms link the same modules
			res.SBOM = filepath.Join(o.Out, "vkubelet.spdx.json")
			sbom, err := SBOM(bin, o.Version, o.Created)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(res.SBOM, sbom, 0o644); err != nil {
				return nil, err
			}
		}
	}
	res.Checksums = filepath.Join(o.Out, "SHA256SUMS")
	if err := os.WriteFile(res.Checksums, []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	var err error
	if res.IndexDigest, err = idx.Digest(); err != nil {
		return nil, err
	}
	res.Image = filepath.Join(o.Out, "vkubelet-image.tar")
	if err := image.WriteIndexArchive(idx, image.DefaultRepository+":"+o.Version, res.Image); err != nil {
		return nil, err
	}
	if res.Chart, err = packageChart(ctx, o); err != nil {
		return nil, err
	}
	if o.Registry == "" {
		return res, nil
	}
	if err := push(ctx, o, idx, res); err != nil {
		return nil, err
	}
	return res, nil
}

// chartVersion is the chart's version for a release's: SemVer without the v.
func chartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// packageChart packages charts/vkubelet at the release's version, the image's
// tag its appVersion. Released to a registry, the chart's image is the one
// pushed there (Registry/vkubelet), so that `helm install` with the defaults
// runs the image released with the chart.
func packageChart(ctx context.Context, o Options) (string, error) {
	if o.Helm == "" {
		return "", errors.New("release: packaging the chart needs helm (Options.Helm)")
	}
	chart := filepath.Join(o.ModuleDir, "charts", "vkubelet")
	if o.Registry != "" {
		tmp, err := os.MkdirTemp("", "vkubelet-chart-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		dst := filepath.Join(tmp, "vkubelet")
		if err := os.CopyFS(dst, os.DirFS(chart)); err != nil {
			return "", fmt.Errorf("release: copying the chart: %w", err)
		}
		values, err := os.ReadFile(filepath.Join(dst, "values.yaml"))
		if err != nil {
			return "", err
		}
		if values, err = withImageRepository(values, strings.TrimSuffix(o.Registry, "/")+"/vkubelet"); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dst, "values.yaml"), values, 0o644); err != nil {
			return "", err
		}
		chart = dst
	}
	cmd := exec.CommandContext(ctx, o.Helm, "package", chart,
		"--version", chartVersion(o.Version), "--app-version", o.Version, "--destination", o.Out)
	cmd.Env = helmEnv(o.Out)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("release: helm package: %w\n%s", err, out)
	}
	return filepath.Join(o.Out, "vkubelet-"+chartVersion(o.Version)+".tgz"), nil
}

// withImageRepository is the chart's values.yaml with image.repository set to
// repo. The file is edited as text, not decoded and encoded again, so that its
// comments (the chart's documentation) are kept.
func withImageRepository(values []byte, repo string) ([]byte, error) {
	lines := strings.SplitAfter(string(values), "\n")
	inImage := false
	for i, l := range lines {
		switch {
		case strings.TrimRight(l, "\n") == "image:":
			inImage = true
		case inImage && strings.HasPrefix(l, "  repository:"):
			lines[i] = "  repository: " + repo + "\n"
			return []byte(strings.Join(lines, "")), nil
		case inImage && l != "" && l[0] != ' ' && l[0] != '#' && l[0] != '\n':
			inImage = false // the next top-level key: image has no repository
		}
	}
	return nil, errors.New("release: the chart's values.yaml has no image.repository")
}

// helmEnv keeps helm's caches out of the user's; its configuration, where
// `helm registry login` keeps the registry's credentials, is the user's.
func helmEnv(dir string) []string {
	home := filepath.Join(dir, ".helm")
	return append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
}

// push pushes the index, the SBOM and the chart to o.Registry.
func push(ctx context.Context, o Options, idx v1.ImageIndex, res *Result) error {
	var opts []name.Option
	if o.PlainHTTP {
		opts = append(opts, name.Insecure)
	}
	repo := strings.TrimSuffix(o.Registry, "/") + "/vkubelet"
	tag, err := name.NewTag(repo+":"+o.Version, opts...)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	fmt.Fprintf(o.Log, "release: pushing %s\n", tag)
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("release: pushing the image: %w", err)
	}
	res.ImageRef = tag.String() + "@" + res.IndexDigest.String()

	sbom, err := os.ReadFile(res.SBOM)
	if err != nil {
		return err
	}
	art, err := sbomArtifact(sbom, o.Created)
	if err != nil {
		return err
	}
	sbomTag, err := name.NewTag(repo+":"+o.Version+".sbom", opts...)
	if err != nil {
		return err
	}
	if err := remote.Write(sbomTag, art, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("release: pushing the SBOM: %w", err)
	}
	res.SBOMRef = sbomTag.String()

	chartRepo := "oci://" + strings.TrimSuffix(o.Registry, "/") + "/charts"
	args := []string{"push", res.Chart, chartRepo}
	if o.PlainHTTP {
		args = append(args, "--plain-http")
	}
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	cmd.Env = helmEnv(o.Out)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("release: helm push: %w\n%s", err, out)
	}
	res.ChartRef = chartRepo + "/vkubelet:" + chartVersion(o.Version)
	return nil
}
