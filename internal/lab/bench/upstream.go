package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// startUpstreamMock runs upstream virtual-kubelet's mock provider on vkubelet's
// engine: cfg.UpstreamNode, a vkubelet with the mock compiled in through the
// adapter, started as the agent is (same flags, its own writes counted by
// itself), with --provider upstream-mock.
func startUpstreamMock(ctx context.Context, cfg Config) (*node, error) {
	cfg.Binary = cfg.UpstreamNode
	n, err := startAgentWith(ctx, cfg, "upstream-mock", "bench-upstream-mock-node", []string{"--provider", "upstream-mock"})
	if err != nil {
		return nil, err
	}
	n.registeredIsReady = true
	return n, nil
}

// startUpstreamEngine runs upstream virtual-kubelet's own command with its mock
// provider, configured with room for the pods, on loopback ports of its own.
// It counts no requests of its own, so its writes are the API server's count
// less the benchmark's pod creations, as kwok's; it serves no heap profile
// (its pprof is behind its serving certificate and authentication), so its live
// heap is not measured.
func startUpstreamEngine(ctx context.Context, c kubernetes.Interface, cfg Config) (*node, error) {
	const name = "bench-upstream-engine-node"
	metrics, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	kubelet, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, kubeletPort, _ := strings.Cut(kubelet, ":")
	dir, err := os.MkdirTemp("", "vkubelet-bench-upstream-")
	if err != nil {
		return nil, err
	}
	// The mock's configuration is keyed by node name; without one it offers 20
	// pods.
	pods := max(cfg.Pods, cfg.UpstreamEnginePods)
	conf := filepath.Join(dir, "mock.json")
	mockConfig := fmt.Sprintf(`{%q: {"cpu": "%d", "memory": "%dGi", "pods": "%d"}}`, name, pods, pods, pods)
	if err := os.WriteFile(conf, []byte(mockConfig), 0o644); err != nil {
		return nil, err
	}
	// Upstream's command refuses to start without a serving certificate.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	n := &node{kind: "upstream-engine", names: []string{name}, registeredIsReady: true,
		benchWrites: map[string]float64{"POST pods": 1}}
	n.cleanup = func() { _ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) }
	args := []string{"--kubeconfig", cfg.Kubeconfig, "--nodename", name, "--provider", "mock", "--provider-config", conf,
		"--metrics-addr", metrics, "--disable-taint", "--log-level", "warn"}
	env := []string{"KUBELET_PORT=" + kubeletPort, "VKUBELET_POD_IP=127.0.0.1",
		"APISERVER_CERT_LOCATION=" + certFile, "APISERVER_KEY_LOCATION=" + keyFile}
	if n.proc, err = proc.Start(ctx, cfg.UpstreamEngine, args, env, dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "bench: upstream virtual-kubelet pid %d: %s %s\n", n.proc.Cmd.Process.Pid, cfg.UpstreamEngine, strings.Join(args, " "))
	n.writes = apiServerWrites(cfg.RESTConfig)
	return n, nil
}
