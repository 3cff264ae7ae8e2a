package interlink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/interlinkplugin"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/interlink"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/remote/conformance"
)

func TestMain(m *testing.M) {
	// The controller manager signs the node's serving certificate (logs).
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// A node with --provider interlink runs its pods through an interLink plugin: the
// pod is submitted with the resolved data of its ConfigMap and of its
// service-account token volume (as a projected volume map), its status polled, its
// logs fetched, all with the plugin's bearer token; a restarted node finds the job
// again instead of submitting it twice; a deleted pod is deleted in the plugin.
func TestANodeRunsPodsThroughAnInterLinkPlugin(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "interlink-node"
	m, err := mock.New(mock.Config{}, node)
	if err != nil {
		t.Fatal(err)
	}
	pl := interlinkplugin.New(m, "s3cret")
	srv := httptest.NewServer(pl)
	defer srv.Close()

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "interlink.json")
	b, _ := json.Marshal(map[string]any{"url": srv.URL, "tokenFile": tokenFile, "stateFile": filepath.Join(dir, "state.json"),
		"pollInterval": "500ms", "capacity": map[string]string{"cpu": "100", "memory": "1Ti", "pods": "500"}})
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	config := func() (cfg agent.Config) {
		cfg = nodetest.MockConfig(t, node, mock.Config{})
		cfg.Provider, cfg.ProviderConfig = "interlink", cfgFile
		cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true
		return cfg
	}
	_, stop := nodetest.Run(t, config())
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) })

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "job-input"},
		Data: map[string]string{"input.txt": "42"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hpc-job"},
		Spec: corev1.PodSpec{NodeName: node,
			Volumes: []corev1.Volume{{Name: "input", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "job-input"}}}}},
			Containers: []corev1.Container{{Name: "solver", Image: "busybox", Args: []string{"solving", "done"},
				VolumeMounts: []corev1.VolumeMount{{Name: "input", MountPath: "/input"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "hpc-job", corev1.PodRunning)
	submitted, _, _ := pl.Submitted(pod.UID)
	sent, _ := json.Marshal(submitted.Containers)
	if !strings.Contains(string(sent), `"name":"job-input"`) || !strings.Contains(string(sent), `"input.txt":"42"`) ||
		!strings.Contains(string(sent), `"projectedvolumemaps":[{"data":{"ca.crt"`) || !strings.Contains(string(sent), `"token":"ey`) {
		t.Errorf("the plugin got the container data %s", sent)
	}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		b, err := c.CoreV1().Pods(ns).GetLogs("hpc-job", &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && string(b) == "solving\ndone\n", fmt.Sprintf("logs %q, %v", b, err)
	})
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pods := n.Status.Capacity[corev1.ResourcePods]; pods.Value() != 500 {
		t.Errorf("node capacity pods %s, want the configured 500", pods.String())
	}

	// A restarted node finds the job in its state file: no second submission.
	stop()
	nodetest.Run(t, config())
	testenv.WaitPhase(t, ns, "hpc-job", corev1.PodRunning)
	time.Sleep(2 * time.Second) // a few polls and syncs
	_, creates, _ := pl.Submitted(pod.UID)
	if creates != 1 {
		t.Errorf("the pod was submitted %d times", creates)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "hpc-job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "hpc-job", metav1.GetOptions{})
		left, _ := m.GetPods(ctx)
		return err != nil && len(left) == 0, fmt.Sprintf("API: %v, plugin: %d pods", err, len(left))
	})
}

// The interLink provider, served over vkubelet's provider protocol, passes the
// provider conformance suite with the plugin behind it.
func TestTheInterLinkProviderPassesTheConformanceSuite(t *testing.T) {
	m, err := mock.New(mock.Config{}, "conformance")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(interlinkplugin.New(m, "t0ken"))
	defer srv.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := interlink.New(interlink.Config{URL: srv.URL, TokenFile: filepath.Join(dir, "token"), StateFile: filepath.Join(dir, "state.json"),
		PollInterval: providerutil.Duration{Duration: 300 * time.Millisecond}, Timeout: providerutil.Duration{Duration: 10 * time.Second}}, "conformance", nil)
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "vki")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	l, err := net.Listen("unix", filepath.Join(sockDir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- remote.NewServer(ctx, p, "interlink", nil).Serve(ctx, l, remote.ServeOptions{}) }()
	defer func() { cancel(); <-done }()
	var log strings.Builder
	results, err := conformance.Run(context.Background(), conformance.Config{
		Remote: remote.Config{Endpoint: "unix://" + filepath.Join(sockDir, "p.sock")}, NodeName: "conformance", Timeout: 30 * time.Second, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance:\n%s", log.String())
	if err := conformance.Failed(results); err != nil {
		t.Error(err)
	}
}
