package image

import (
	"context"
	"crypto/sha256"
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
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// Two builds of one source give one digest and byte-identical archives; the
// archive loads into a real containerd with `ctr images import`, and the image
// runs `vkubelet version` there as user 65532; a registry accepts the archive's
// image and serves it back under the same digest.
func TestTheImageIsReproducibleImportsIntoContainerdAndRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds vkubelet and runs containerd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	module, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{ModuleDir: module, Version: "v0.0.0-imagetest", Revision: "0123abc", Created: time.Unix(1_700_000_000, 0)}
	const ref = DefaultRepository + ":v0.0.0-imagetest"
	var archives [2]string
	var sums [2][32]byte
	for i := range archives {
		img, err := Build(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		archives[i] = filepath.Join(t.TempDir(), "image.tar")
		if err := WriteArchive(img, ref, archives[i]); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(archives[i])
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b)
		if i == 0 {
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != Binary || !cf.Created.Equal(opts.Created) {
				t.Errorf("config: user %q, entrypoint %q, created %s", cf.Config.User, cf.Config.Entrypoint, cf.Created)
			}
		}
	}
	if sums[0] != sums[1] {
		t.Fatalf("two builds gave two archives: %x and %x", sums[0], sums[1])
	}

	// The archive is an OCI layout; its image is what a registry push sends.
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archives[0], "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[ociRefName] != ref {
		t.Fatalf("index: %+v", m.Manifests)
	}
	want := m.Manifests[0].Digest
	img, err := idx.Image(want)
	if err != nil {
		t.Fatal(err)
	}
	// Read as a Docker archive (as crane push and docker load read it), the
	// archive holds the same image.
	tagged, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	docker, err := tarball.ImageFromPath(archives[0], &tagged)
	if err != nil {
		t.Fatalf("the archive read as a Docker archive: %v", err)
	}
	if got, err := docker.Digest(); err != nil || got != want {
		t.Errorf("read as a Docker archive, the image is %s (%v), the layout holds %s", got, err, want)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	pushed, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://")+"/vkubelet:test", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(pushed, img); err != nil {
		t.Fatalf("push: %v", err)
	}
	pulled, err := remote.Image(pushed)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("the registry serves %s, the archive holds %s", got, want)
	}

	testenv.Require(t, crienv.Available())
	env, err := crienv.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	out, err := env.ImportImage(ctx, archives[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ctr images import: %s", strings.TrimSpace(out))
	if out, err = env.Ctr(ctx, "images", "ls", "-q"); err != nil || !strings.Contains(out, ref) {
		t.Fatalf("containerd's images after the import: %q, %v", out, err)
	}
	out, err = env.Ctr(ctx, "run", "--rm", ref, "imagetest-version", Binary, "version")
	if err != nil || !strings.Contains(out, opts.Version) {
		t.Errorf("vkubelet version in the image: %q, %v", out, err)
	}
}
