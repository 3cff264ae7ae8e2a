package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/lab/image"
	"github.com/vkubelet/vkubelet/internal/lab/previous"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/version"
)

// previousTag is the tag the previous version's image is imported under.
const previousTag = "v0.0.0-previous"

// importPrevious builds the previous version's image (package previous: its
// binary in vkubelet's image) and imports it into the host's containerd.
func (h *host) importPrevious(t *testing.T, repo string) {
	t.Helper()
	ctx := context.Background()
	bin, err := previous.Build(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.FromBinary(b, image.Options{Version: previousTag, Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "previous.tar")
	if err := image.WriteArchive(uncompressed(t, img), image.DefaultRepository+":"+previousTag, archive); err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
}

// The previous version's chart and image (package previous) install the
// interLink provider against a plugin the test serves, and pods run through it;
// `helm upgrade` to this chart and image, then `helm rollback` to the first
// revision, each replace the node's pod, and with it the provider's state file
// (an emptyDir). After each, every pod has its containers as they were (IDs,
// start times, restart counts) and the node runs new pods; this version
// submitted none again.
func testUpgradeFromThePreviousVersion(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node, release = "chart-upgrade", "upgrade"
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := previous.Chart(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	h.importPrevious(t, repo)

	plugin, providerValues := servePlugin(t, c, ns, node)
	values := h.values(t, node)
	values["image"] = map[string]any{"tag": previousTag, "pullPolicy": "Never"}
	values["provider"] = providerValues
	valuesFile := installChart(t, helm, ns, release, chart, values)
	previousVersion := version.KubernetesVersion + "-vkubelet-" + previous.Version
	testenv.WaitNodeVersion(t, c, node, previousVersion)

	before := map[string]string{}
	for _, name := range []string{"p-0", "p-1", "p-2"} {
		p := runOn(t, c, ns, name, node)
		before[p.Name] = testenv.ContainerInstances(p)
	}
	check := func(after string, wantCreates int) {
		t.Helper()
		// The node runs a new pod, and has left the others alone.
		runOn(t, c, ns, "after-"+after, node)
		for name, was := range before {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("pod %s after the %s: %v", name, after, err)
			}
			if now := testenv.ContainerInstances(p); now != was || p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s after the %s: %s, %s; before: %s", name, after, p.Status.Phase, now, was)
			}
			if _, creates, _ := plugin.Submitted(p.UID); creates != wantCreates {
				t.Errorf("pod %s after the %s: submitted to the plugin %d times, want %d", name, after, creates, wantCreates)
			}
		}
	}

	if out, err := helm("upgrade", release, chartDir(t), "--namespace", ns, "-f", valuesFile,
		"--set", "image.tag="+h.tag, "--wait", "--timeout", "4m"); err != nil {
		describe(t, c, ns, node)
		t.Fatalf("%v\n%s", err, out)
	}
	testenv.WaitNodeVersion(t, c, node, version.KubernetesVersion+"-vkubelet-"+h.tag)
	check("upgrade", 1)

	if out, err := helm("rollback", release, "1", "--namespace", ns, "--wait", "--timeout", "4m"); err != nil {
		describe(t, c, ns, node)
		t.Fatalf("%v\n%s", err, out)
	}
	testenv.WaitNodeVersion(t, c, node, previousVersion)
	// The previous version, its state file lost with the replaced pod, submits
	// every pod once more: it does not ask the plugin first. This plugin takes
	// a pod it runs as the same pod; a plugin that submits a second job runs
	// two. Once the previous version is one that asks, want 1.
	check("rollback", 2)
}

// runOn runs a pod named name that the scheduler places on node, waits for it
// to run and returns it as it runs.
func runOn(t *testing.T, c kubernetes.Interface, ns, name, node string) *corev1.Pod {
	t.Helper()
	_, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Tolerations:  []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
			Containers:   []corev1.Container{{Name: "main", Image: "busybox", Args: []string{"sleep", "3600"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running = p
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1,
			fmt.Sprintf("pod %s on %q: %s %s", name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
	})
	return running
}
