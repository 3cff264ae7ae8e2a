package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// readVerbs are the request verbs that write nothing.
var readVerbs = map[string]bool{"GET": true, "LIST": true, "WATCH": true}

// startAgent runs the node agent (the vkubelet binary, mock provider) as a child
// process. Its API writes are its own count, vkubelet_api_requests_total.
//
// With Config.Nodes above one, the process runs that many nodes from a NodeSet
// file (`vkubelet run --config`), sharing one client and one pod watch.
func startAgent(ctx context.Context, cfg Config) (*node, error) {
	if cfg.Nodes > 1 {
		return startFleet(ctx, cfg)
	}
	return startAgentWith(ctx, cfg, "vkubelet", "bench-node", []string{"--provider", "mock"})
}

// startFleet runs cfg.Nodes mock nodes, bench-node-0 …, in one agent process.
func startFleet(ctx context.Context, cfg Config) (*node, error) {
	dir, err := os.MkdirTemp("", "vkubelet-bench-nodeset-")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "nodeset.yaml")
	set := fmt.Sprintf("apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n  - name: bench-node-%%d\n    count: %d\n    provider: mock\n", cfg.Nodes)
	if err := os.WriteFile(file, []byte(set), 0o644); err != nil {
		return nil, err
	}
	n, err := startAgentWith(ctx, cfg, "vkubelet", "", []string{"--config", file})
	if err != nil {
		return nil, err
	}
	n.names = numbered("bench-node-", cfg.Nodes)
	return n, nil
}

// numbered returns prefix0, prefix1, … prefix(n-1).
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// startRemoteAgent runs the node agent with --provider remote, and the mock behind
// it in a process of its own (`vkubelet provider serve` on a unix socket): the
// same node as startAgent's, with the provider protocol between agent and mock.
func startRemoteAgent(ctx context.Context, cfg Config) (*node, error) {
	dir, err := os.MkdirTemp("", "vkbr")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "p.sock")
	const name = "bench-remote-node"
	pprofAddr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"provider", "serve", "--provider", "mock", "--nodename", name,
		"--listen", "unix://" + sock, "--pprof-addr", pprofAddr, "--log-level", "warn"}
	mock, err := proc.Start(ctx, cfg.Binary, args, cfg.AgentEnv, dir)
	if err != nil {
		return nil, fmt.Errorf("starting the provider: %w", err)
	}
	fmt.Fprintf(cfg.Log, "bench: provider pid %d: %s %s\n", mock.Cmd.Process.Pid, cfg.Binary, strings.Join(args, " "))
	conf := filepath.Join(dir, "remote.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"endpoint": "unix://%s"}`, sock)), 0o644); err != nil {
		mock.Stop()
		return nil, err
	}
	n, err := startAgentWith(ctx, cfg, "vkubelet-remote", name, []string{"--provider", "remote", "--provider-config", conf})
	if err != nil {
		mock.Stop()
		return nil, err
	}
	n.provider = mock
	n.cleanup = mock.Stop
	return n, nil
}

func startAgentWith(ctx context.Context, cfg Config, kind, name string, providerArgs []string) (*node, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vkubelet-bench-")
	if err != nil {
		return nil, err
	}
	n := &node{kind: kind, names: []string{name}, metricsURL: "http://" + addr}
	args := []string{"--kubeconfig", cfg.Kubeconfig}
	if name != "" { // else the nodes are a NodeSet file's, in providerArgs
		args = append(args, "--nodename", name)
	}
	args = append(append(args, providerArgs...),
		"--metrics-addr", addr, "--kubelet-port", "0", "--self-signed-serving-cert", "--disable-taint",
		"--cert-dir", dir, "--log-level", "warn")
	args = append(args, cfg.AgentArgs...)
	if n.proc, err = proc.Start(ctx, cfg.Binary, args, cfg.AgentEnv, dir); err != nil {
		return nil, fmt.Errorf("starting the node agent: %w", err)
	}
	fmt.Fprintf(cfg.Log, "bench: node agent pid %d: %s %s\n", n.proc.Cmd.Process.Pid, cfg.Binary, strings.Join(args, " "))
	n.writes = func(ctx context.Context) (map[string]float64, error) {
		out := map[string]float64{}
		err := proc.Scrape(ctx, http.DefaultClient, n.metricsURL+"/metrics", func(name string, l map[string]string, v float64) {
			if name == "vkubelet_api_requests_total" && !readVerbs[l["verb"]] {
				out[l["verb"]+" "+l["resource"]] += v
			}
		})
		return out, err
	}
	n.podWatches = func(ctx context.Context) (float64, error) {
		var watches float64
		err := proc.Scrape(ctx, http.DefaultClient, n.metricsURL+"/metrics", func(name string, l map[string]string, v float64) {
			if name == "vkubelet_api_requests_total" && isPodWatch(l["verb"], l["resource"]) {
				watches += v
			}
		})
		return watches, err
	}
	return n, nil
}

// kwokNode is the Node kwok manages: a plain Node object, as kwok's documentation
// creates them; kwok's node-initialize stage gives it its status.
func kwokNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
		},
		Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
	}}
}

// startKwok creates a Node for kwok and runs kwok as a child process managing that
// node alone (so it watches only that node's pods, as a kubelet does), with the
// stages kwokctl gives it by default and a node lease of 40 s, as kwokctl runs it.
// kwok counts no requests of its own, so its writes are the API server's count
// (apiserver_request_total) less the benchmark's own pod creations; anything
// else writing to the API server meanwhile is counted too (on the benchmark's own
// control plane: the API server's own lease, every 10 s).
func startKwok(ctx context.Context, c kubernetes.Interface, cfg Config) (*node, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vkubelet-bench-kwok-")
	if err != nil {
		return nil, err
	}
	n := &node{kind: "kwok", names: []string{"bench-kwok-node"}, metricsURL: "http://" + addr,
		benchWrites: map[string]float64{"POST pods": 1}}
	// One node: kwok manages it alone (and watches only its pods, as a kubelet
	// does); several: the nodes labelled for it, all pods watched at once.
	manage := "--manage-single-node=" + n.names[0]
	if cfg.Nodes > 1 {
		n.names = numbered("bench-kwok-node-", cfg.Nodes)
		manage = "--manage-nodes-with-label-selector=type=kwok"
	}
	n.cleanup = func() {
		for _, name := range n.names {
			_ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}
	for _, name := range n.names {
		if _, err := c.CoreV1().Nodes().Create(ctx, kwokNode(name), metav1.CreateOptions{}); err != nil {
			n.cleanup()
			return nil, fmt.Errorf("creating node %s for kwok: %w", name, err)
		}
	}
	args := []string{
		"--kubeconfig=" + cfg.Kubeconfig,
		manage,
		"--config=" + cfg.KwokStages,
		"--node-lease-duration-seconds=40",
		"--server-address=" + addr, // /metrics and /debug/pprof, for the live heap
		"--v=WARN",                 // as the agent runs with --log-level warn
	}
	// kwok also reads ~/.kwok/kwok.yaml if there is one; a HOME of its own keeps a
	// user's configuration out of the measurement.
	env := []string{"HOME=" + dir}
	if n.proc, err = proc.Start(ctx, cfg.KwokBinary, args, env, dir); err != nil {
		n.cleanup()
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "bench: kwok pid %d: %s %s\n", n.proc.Cmd.Process.Pid, cfg.KwokBinary, strings.Join(args, " "))
	n.writes = apiServerWrites(cfg.RESTConfig)
	return n, nil
}

// apiServerWrites returns a function reading the API server's count of write
// requests, keyed "VERB resource[/subresource]".
func apiServerWrites(cfg *rest.Config) func(ctx context.Context) (map[string]float64, error) {
	return func(ctx context.Context) (map[string]float64, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		out := map[string]float64{}
		err = proc.Scrape(ctx, hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics", func(name string, l map[string]string, v float64) {
			if name != "apiserver_request_total" || readVerbs[l["verb"]] || l["verb"] == "CONNECT" {
				return
			}
			kind := l["resource"]
			if l["subresource"] != "" {
				kind += "/" + l["subresource"]
			}
			out[l["verb"]+" "+kind] += v
		})
		return out, err
	}
}

// caBundle is the cluster CA the client trusts, for the kube-root-ca.crt
// ConfigMap; empty if the client trusts the system's roots.
func caBundle(cfg *rest.Config) []byte {
	if len(cfg.CAData) > 0 {
		return cfg.CAData
	}
	if cfg.CAFile != "" {
		if b, err := os.ReadFile(filepath.Clean(cfg.CAFile)); err == nil {
			return b
		}
	}
	return nil
}

// isPodWatch says whether vkubelet_api_requests_total's verb and resource
// labels (agent.APIRequestLabels) count a pod watch: a watch, or a list
// streamed as one (a relist).
func isPodWatch(verb, resource string) bool {
	return verb == http.MethodGet && (resource == "pods (watch)" || resource == "pods (watch list)")
}
