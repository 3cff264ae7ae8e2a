package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/release"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A release, as `make release REGISTRY=…` makes it, pushed to the registry the
// host's containerd pulls from and installed from there with the chart's
// defaults for the image: the chart comes from the registry, the node's image is
// pulled from it (nothing was imported under that name), the pod runs the
// pushed index, and the released node is Ready, passes helm test and runs a pod.
// One platform is built here; the release's test builds both.
func testTheReleaseFromItsRegistry(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const (
		node    = "chart-released"
		version = "v0.0.2-test"
	)
	module, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	helmBin, err := controlplane.EnsureHelm(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := release.Make(ctx, release.Options{ModuleDir: module, Version: version, Revision: "0123456789abcdef",
		Created: time.Unix(0, 0), Platforms: []string{"linux/amd64"}, Out: t.TempDir(),
		Registry: h.env.Registry + "/released", PlainHTTP: true, Helm: helmBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("released %s to %s (%s)", version, res.ImageRef, time.Since(start).Round(100*time.Millisecond))
	ref, err := name.ParseReference(res.ImageRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Index(ref); err != nil {
		t.Fatalf("the pushed image index: %v", err)
	}

	values := h.values(t, node)
	delete(values, "image") // the released chart's own: the pushed image, pulled
	values["tests"] = map[string]any{"image": h.importKubectl(t), "probeImage": h.env.Pause, "timeoutSeconds": 90}
	at := strings.LastIndex(res.ChartRef, ":") // oci://host:port/released/charts/vkubelet:0.0.2-test
	chart, chartVersion := res.ChartRef[:at], res.ChartRef[at+1:]
	installChart(t, helm, ns, "released", chart, values, "--version", chartVersion, "--plain-http")
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)

	pod := chartPod(t, c, ns, "released")
	wantImage := h.env.Registry + "/released/vkubelet:" + version
	if img := pod.Spec.Containers[0].Image; img != wantImage {
		t.Errorf("the released chart runs %s, want %s", img, wantImage)
	}
	var imageID string
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == pod.Spec.Containers[0].Name {
			imageID = st.ImageID
		}
	}
	if !strings.HasSuffix(imageID, "@"+res.IndexDigest.String()) {
		t.Errorf("the node's container runs image %q, want the pushed index %s", imageID, res.IndexDigest)
	}
	if out, err := helm("test", "released", "--namespace", ns, "--timeout", "3m"); err != nil {
		describe(t, c, ns, node)
		t.Fatalf("%v\n%s", err, out)
	}
	runPodOn(t, c, ns, node)
}
