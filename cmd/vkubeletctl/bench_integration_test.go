package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/lab/bench"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// runBench runs `vkubeletctl bench --json` with args and decodes its result.
func runBench(t *testing.T, args ...string) *bench.Result {
	t.Helper()
	out, err := exec.Command(vkubeletctl, append([]string{"bench", "--json"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("bench: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r bench.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	return &r
}

// checkNodeFigures checks that a node's figures are those of a real run: every
// pod started and stopped, the process measured.
func checkNodeFigures(t *testing.T, name string, n *bench.NodeResult) {
	t.Helper()
	if n.PodsPerS <= 0 || n.DeletePodsPerS <= 0 || n.RatioToCeiling <= 0 {
		t.Errorf("%s: throughput missing: %+v", name, n)
	}
	if !(n.P50ms > 0 && n.P50ms <= n.P90ms && n.P90ms <= n.P99ms) {
		t.Errorf("%s: latencies p50/p90/p99 = %v/%v/%v", name, n.P50ms, n.P90ms, n.P99ms)
	}
	if n.IdleRSSMiB <= 0 || n.PeakRSSMiB < n.IdleRSSMiB || n.CPUSeconds <= 0 {
		t.Errorf("%s: usage not measured: idle %v, peak %v MiB, cpu %v s", name, n.IdleRSSMiB, n.PeakRSSMiB, n.CPUSeconds)
	}
	// Each start is one status write; a lease may renew during the run.
	if w := n.WritesByKind["PATCH pods/status"]; w < 0.99 || w > 1.01 {
		t.Errorf("%s: status writes per pod = %v, want 1: %v", name, w, n.WritesByKind)
	}
}

// TestBenchMeasuresANodeNextToTheCeiling runs `vkubeletctl bench` for a few pods of
// the old, token-less shape against the test control plane (no ServiceAccount
// admission) and checks that its figures are those of a real run.
func TestBenchMeasuresANodeNextToTheCeiling(t *testing.T) {
	cp := testenv.ControlPlane(t)
	r := runBench(t, "--pods", "40", "--concurrency", "10", "--pod-shape", "minimal",
		"--kubeconfig", cp.KubeconfigPath, "--agent-env", "GOGC=100")
	if r.Pods != 40 || r.PodShape != bench.ShapeMinimal || r.CeilingPodsPerS <= 0 || r.CeilingDeletePodsPerS <= 0 {
		t.Fatalf("figures missing: %+v", r)
	}
	if r.RatioToCeiling != r.PodsPerS/r.CeilingPodsPerS {
		t.Errorf("ratio %v is not %v / %v", r.RatioToCeiling, r.PodsPerS, r.CeilingPodsPerS)
	}
	checkNodeFigures(t, "vkubelet", &r.NodeResult)
	if _, ok := r.WritesByKind["POST serviceaccounts/token"]; ok || r.CeilingWritesPerPod != 1 {
		t.Errorf("token-less pods: ceiling writes %v per pod, agent's %v", r.CeilingWritesPerPod, r.WritesByKind)
	}
	if r.Kwok != nil {
		t.Errorf("kwok figures without --compare: %+v", r.Kwok)
	}
}

// TestBenchComparesKwokOnDeploymentShapedPods runs `vkubeletctl bench --compare kwok`
// with the default pod shape on a control plane with the ServiceAccount admission
// plugin, and checks that the ceiling, kwok and the agent all have figures, that
// the ceiling and the agent requested a token per pod, and that the pods in the
// API really carry the token volume and their owner.
func TestBenchComparesKwokOnDeploymentShapedPods(t *testing.T) {
	testenv.ControlPlane(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Config{ServiceAccountAdmission: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()

	// The first pod the API server admitted for each node, as it stored it.
	client, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	first := map[string]*corev1.Pod{}
	factory := informers.NewSharedInformerFactory(client, 0)
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			p := obj.(*corev1.Pod)
			mu.Lock()
			defer mu.Unlock()
			if first[p.Spec.NodeName] == nil {
				first[p.Spec.NodeName] = p
			}
		},
	})
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	r := runBench(t, "--pods", "50", "--compare", "kwok", "--kubeconfig", cp.KubeconfigPath)

	if r.Pods != 50 || r.PodShape != bench.ShapeDeployment {
		t.Errorf("pods %d of shape %q, want 50 of the deployment shape", r.Pods, r.PodShape)
	}
	if r.CeilingPodsPerS <= 0 || r.CeilingBefore <= 0 || r.CeilingAfter <= 0 || r.CeilingDeletePodsPerS <= 0 {
		t.Errorf("ceiling figures missing: %+v", r)
	}
	// The ceiling writes a status and requests a token per pod, as a node must.
	if r.CeilingWritesPerPod != 2 {
		t.Errorf("ceiling writes per pod = %v, want 2 (TokenRequest and status)", r.CeilingWritesPerPod)
	}
	checkNodeFigures(t, "vkubelet", &r.NodeResult)
	if w := r.WritesByKind["POST serviceaccounts/token"]; w < 0.99 || w > 1.01 {
		t.Errorf("vkubelet: TokenRequests per pod = %v, want 1: %v", w, r.WritesByKind)
	}
	if r.Kwok == nil {
		t.Fatal("no kwok figures")
	}
	checkNodeFigures(t, "kwok", r.Kwok)
	if r.Kwok.WritesCountedBy != "apiserver" || r.WritesCountedBy != "agent" {
		t.Errorf("writes counted by %q (kwok) and %q (vkubelet)", r.Kwok.WritesCountedBy, r.WritesCountedBy)
	}
	if _, ok := r.Kwok.WritesByKind["POST pods"]; ok {
		t.Errorf("kwok's writes include the benchmark's pod creations: %v", r.Kwok.WritesByKind)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, node := range []string{"bench-ceiling", "bench-kwok-node", "bench-node"} {
		p := first[node]
		if p == nil {
			t.Errorf("no pod seen on %s", node)
			continue
		}
		if !hasTokenVolume(p) {
			t.Errorf("pod %s/%s on %s has no kube-api-access token volume: %+v", p.Namespace, p.Name, node, p.Spec.Volumes)
		}
		if p.Spec.ServiceAccountName != "default" {
			t.Errorf("pod %s/%s: service account %q", p.Namespace, p.Name, p.Spec.ServiceAccountName)
		}
		owner := metav1.GetControllerOf(p)
		if owner == nil || owner.Kind != "ReplicaSet" || owner.APIVersion != "apps/v1" {
			t.Errorf("pod %s/%s: owner references %+v, want a controlling ReplicaSet", p.Namespace, p.Name, p.OwnerReferences)
		}
		if p.Labels["app"] == "" || p.Labels["pod-template-hash"] == "" {
			t.Errorf("pod %s/%s: labels %v", p.Namespace, p.Name, p.Labels)
		}
	}
}

// hasTokenVolume reports whether p has the projected volume the ServiceAccount
// admission plugin adds: kube-api-access-*, with a service-account token.
func hasTokenVolume(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if !strings.HasPrefix(v.Name, "kube-api-access-") || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// TestBenchRunsSeveralNodesInEachProcess runs `vkubeletctl bench --nodes 3`: kwok and
// the agent each run three nodes, the pods are spread over them, and the idle
// nodes' cost per node is reported: a Lease write per node per renewal, no Node
// write in the window (the status is written every 5 minutes when unchanged).
func TestBenchRunsSeveralNodesInEachProcess(t *testing.T) {
	cp := testenv.ControlPlane(t)
	r := runBench(t, "--nodes", "3", "--node-idle", "12s", "--pods", "30", "--concurrency", "10",
		"--pod-shape", "minimal", "--compare", "kwok", "--kubeconfig", cp.KubeconfigPath)
	ctx := context.Background()
	c := testenv.Client(t)
	for name, n := range map[string]*bench.NodeResult{"vkubelet": &r.NodeResult, "kwok": r.Kwok} {
		if n == nil {
			t.Fatalf("%s: no figures", name)
		}
		checkNodeFigures(t, name, n)
		// Lease renewals every 10 s (the bench's nodes run with the defaults).
		if n.Nodes != 3 || n.IdleHeapKiBPerNode <= 0 || n.IdleLeaseWritesPer10sNode < 0.5 || n.IdleLeaseWritesPer10sNode > 2 || n.IdleNodeWritesPerMinNode != 0 {
			t.Errorf("%s: idle figures for 3 nodes: nodes %d, heap %v KiB per node, Lease writes %v per 10 s, Node writes %v per minute",
				name, n.Nodes, n.IdleHeapKiBPerNode, n.IdleLeaseWritesPer10sNode, n.IdleNodeWritesPerMinNode)
		}
	}
	// The Nodes are gone with their processes; they were there, three each.
	events, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Source.Host, "bench-node-") {
			seen[e.Source.Host] = true
		}
	}
	if len(seen) != 3 {
		t.Errorf("Events of %d of the agent's nodes (%v), want 3: the pods were not spread over them", len(seen), seen)
	}
}
