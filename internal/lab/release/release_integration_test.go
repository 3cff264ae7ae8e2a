package release

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/version"
)

// A release made from this checkout for two platforms: each binary is there
// with its checksum, says its version; the SBOM lists the modules it links;
// and what was pushed to a registry comes back from it: the image index with
// both platforms, the SBOM, and the chart, whose pulled copy is the packaged
// one and renders the released image.
func TestAReleaseIsBuiltPushedAndPulledBack(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: builds vkubelet for two platforms and packages the chart (run without -short)")
	}
	ctx := context.Background()
	helm, err := controlplane.EnsureHelm(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	module, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	const v = "v0.0.1-test"
	created := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	res, err := Make(ctx, Options{ModuleDir: module, Version: v, Revision: "0123456789abcdef", Created: created,
		Out: out, Registry: host + "/vkubelet-release", PlainHTTP: true, Helm: helm, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}

	// Binaries and checksums.
	sums := readSums(t, res.Checksums)
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(out, "vkubelet-linux-"+arch)
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := sums[filepath.Base(bin)]; got != hex.EncodeToString(sum[:]) {
			t.Errorf("SHA256SUMS has %q for %s, the file hashes to %x", got, bin, sum)
		}
	}
	got, err := exec.Command(filepath.Join(out, "vkubelet-linux-amd64"), "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info version.Info
	if err := json.Unmarshal(got, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != v || info.Commit != "0123456789abcdef" || info.Date != "2026-11-27T12:00:00Z" {
		t.Errorf("the released binary's version: %+v", info)
	}

	// The SBOM.
	var doc spdxDoc
	b, err := os.ReadFile(res.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	modules := map[string]string{}
	for _, p := range doc.Packages {
		modules[p.Name] = p.VersionInfo
	}
	if doc.SPDXVersion != "SPDX-2.3" || modules["github.com/vkubelet/vkubelet"] != v || modules["k8s.io/client-go"] == "" {
		t.Errorf("SBOM %s: vkubelet %q, client-go %q", doc.SPDXVersion, modules["github.com/vkubelet/vkubelet"], modules["k8s.io/client-go"])
	}

	// The image index, pulled back.
	ref, err := name.ParseReference(res.ImageRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	platforms := map[string]bool{}
	for _, d := range m.Manifests {
		platforms[d.Platform.OS+"/"+d.Platform.Architecture] = true
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture || cf.Config.Labels["org.opencontainers.image.version"] != v {
			t.Errorf("%s's image: architecture %s, version label %q", d.Platform.Architecture, cf.Architecture, cf.Config.Labels["org.opencontainers.image.version"])
		}
	}
	if !platforms["linux/amd64"] || !platforms["linux/arm64"] || len(m.Manifests) != 2 {
		t.Errorf("the pushed index has %v, want linux/amd64 and linux/arm64", platforms)
	}
	if dig, _ := idx.Digest(); dig != res.IndexDigest {
		t.Errorf("pulled index %s, made %s", dig, res.IndexDigest)
	}
	sbomRef, err := name.ParseReference(res.SBOMRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(sbomRef); err != nil {
		t.Errorf("the SBOM artifact: %v", err)
	}

	// The chart, pulled back and rendered.
	pulled := t.TempDir()
	pull := exec.Command(helm, "pull", res.ChartRef[:strings.LastIndex(res.ChartRef, ":")], "--version", chartVersion(v),
		"--plain-http", "--destination", pulled)
	pull.Env = helmEnv(pulled)
	if out, err := pull.CombinedOutput(); err != nil {
		t.Fatalf("helm pull: %v\n%s", err, out)
	}
	local, err := os.ReadFile(res.Chart)
	if err != nil {
		t.Fatal(err)
	}
	remoteCopy, err := os.ReadFile(filepath.Join(pulled, filepath.Base(res.Chart)))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(local) != sha256.Sum256(remoteCopy) {
		t.Error("the pulled chart is not the packaged one")
	}
	tmpl := exec.Command(helm, "template", "vkubelet", filepath.Join(pulled, filepath.Base(res.Chart)), "--skip-tests")
	tmpl.Env = helmEnv(pulled)
	rendered, err := tmpl.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, rendered)
	}
	if want := host + "/vkubelet-release/vkubelet:" + v; !strings.Contains(string(rendered), want) {
		t.Errorf("the released chart does not run the released image (%s):\n%s", want, rendered)
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[file] = sum
	}
	return sums
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if line := strings.TrimRight(string(p), "\n"); line != "" {
		w.t.Log(line)
	}
	return len(p), nil
}
