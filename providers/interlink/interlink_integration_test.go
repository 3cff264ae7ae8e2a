package interlink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/provider"
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

// plugin is an interLink plugin on top of the mock: the REST API as interLink's
// API server calls it, written from the API's description.
type plugin struct {
	mock  *mock.Provider
	token string

	mu      sync.Mutex
	creates map[string]int            // by pod UID
	data    map[string]map[string]any // by pod UID: the container entries received
}

func (p *plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+p.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	ctx := r.Context()
	fail := func(err error) { http.Error(w, err.Error(), http.StatusInternalServerError) }
	switch r.Method + " " + r.URL.Path {
	case "POST /create":
		var reqs []struct {
			Pod        corev1.Pod       `json:"pod"`
			Containers []map[string]any `json:"container"`
		}
		if err := json.NewDecoder(r.Body).Decode(&reqs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var out []map[string]string
		for _, req := range reqs {
			if err := p.mock.CreatePod(ctx, &req.Pod); err != nil {
				fail(err)
				return
			}
			uid := string(req.Pod.UID)
			p.mu.Lock()
			p.creates[uid]++
			p.data[uid] = map[string]any{"container": req.Containers}
			p.mu.Unlock()
			out = append(out, map[string]string{"PodUID": uid, "PodJID": "job-" + uid[:8]})
		}
		_ = json.NewEncoder(w).Encode(out)
	case "POST /delete":
		var pod corev1.Pod
		if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := p.mock.DeletePod(ctx, &pod); err != nil {
			fail(err)
			return
		}
		fmt.Fprint(w, `"OK"`)
	case "GET /status":
		var pods []corev1.Pod
		if err := json.NewDecoder(r.Body).Decode(&pods); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := []map[string]any{}
		for _, pod := range pods {
			st, err := p.mock.GetPodStatus(ctx, pod.Namespace, pod.Name)
			if err != nil {
				continue
			}
			out = append(out, map[string]any{"name": pod.Name, "UID": string(pod.UID), "namespace": pod.Namespace,
				"JID": "job-" + string(pod.UID)[:8], "containers": st.ContainerStatuses, "initContainers": st.InitContainerStatuses})
		}
		_ = json.NewEncoder(w).Encode(out)
	case "GET /getLogs":
		var req struct {
			Namespace, PodName, ContainerName string
			Opts                              struct{ Tail int }
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc, err := p.mock.GetContainerLogs(ctx, req.Namespace, req.PodName, req.ContainerName, provider.ContainerLogOpts{Tail: req.Opts.Tail, TailSet: req.Opts.Tail > 0})
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		defer rc.Close()
		_, _ = io.Copy(w, rc)
	default:
		http.NotFound(w, r)
	}
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
	pl := &plugin{mock: m, token: "s3cret", creates: map[string]int{}, data: map[string]map[string]any{}}
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
	pl.mu.Lock()
	sent, _ := json.Marshal(pl.data[string(pod.UID)])
	pl.mu.Unlock()
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
	pl.mu.Lock()
	creates := pl.creates[string(pod.UID)]
	pl.mu.Unlock()
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
	srv := httptest.NewServer(&plugin{mock: m, token: "t0ken", creates: map[string]int{}, data: map[string]map[string]any{}})
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
