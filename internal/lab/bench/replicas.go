package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// ReplicasResult is what RunReplicas measured: Replicas vkubelet processes
// spreading one NodeSet of Nodes mock nodes (--leader-elect-replicas).
type ReplicasResult struct {
	Nodes    int `json:"nodes"`
	Replicas int `json:"replicas"`
	// SpreadSeconds: from the start of the processes until every node's Lease
	// was held and each replica held its share (N/R, or one more).
	SpreadSeconds float64 `json:"spread_seconds"`
	// ReadySeconds: from the start until every Node was Ready.
	ReadySeconds float64 `json:"ready_seconds"`
	// WindowSeconds is how long the spread nodes were watched, idle, for the
	// figures below.
	WindowSeconds float64 `json:"window_seconds"`
	// LeaseRequestsPerS are the API server's requests on Leases during the
	// window, per second, by verb: the election Leases and the nodes' own.
	LeaseRequestsPerS map[string]float64 `json:"lease_requests_per_s"`
	Each              []ReplicaResult    `json:"each"`
}

// ReplicaResult is one replica's share and cost.
type ReplicaResult struct {
	Pid   int `json:"pid"`
	Nodes int `json:"nodes"` // held at the end of the window
	// CPUPercent is its CPU time during the window over the window (100: a core).
	CPUPercent float64 `json:"cpu_percent"`
	RSSMiB     float64 `json:"rss_mib"`
	PeakMiB    float64 `json:"peak_rss_mib"`
	// CPUSecondsToSpread is its CPU time from its start to the end of the
	// spreading (registering and starting its nodes).
	CPUSecondsToSpread float64 `json:"cpu_seconds_to_spread"`
}

// RunReplicas starts replicas vkubelet processes at once, each with the same
// NodeSet of cfg.Nodes mock nodes and --leader-elect-replicas, waits until the
// nodes are spread and Ready, and watches them idle for cfg.NodeIdle (default
// 30 s): each replica's share, CPU and memory, and the Lease traffic.
func RunReplicas(ctx context.Context, cfg Config, replicas int) (*ReplicasResult, error) {
	if replicas < 1 || cfg.Nodes < 1 {
		return nil, errors.New("replicas: at least one replica and one node")
	}
	if cfg.NodeIdle == 0 {
		cfg.NodeIdle = 30 * time.Second
	}
	client, err := loadClient(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vkubelet-bench-replicas-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "nodeset.yaml")
	set := fmt.Sprintf("apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n  - name: bench-node-%%d\n    count: %d\n    provider: mock\n", cfg.Nodes)
	if err := os.WriteFile(file, []byte(set), 0o644); err != nil {
		return nil, err
	}
	names := numbered("bench-node-", cfg.Nodes)
	ns := "default"
	defer func() {
		for _, n := range names {
			_ = client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
			_ = client.CoordinationV1().Leases(ns).Delete(context.Background(), "vkubelet-"+n, metav1.DeleteOptions{})
		}
	}()

	host, _ := os.Hostname()
	began := time.Now()
	procs := make([]*node, 0, replicas)
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	ids := map[string]int{} // identity → index
	for i := range replicas {
		n, err := startAgentWith(ctx, cfg, fmt.Sprintf("vkubelet-%d", i), "", []string{"--config", file,
			"--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-replicas", strconv.Itoa(replicas),
			"--leader-elect-group", "vkubelet-bench"})
		if err != nil {
			return nil, err
		}
		procs = append(procs, n)
		ids[host+"_"+strconv.Itoa(n.proc.Cmd.Process.Pid)] = i
	}
	res := &ReplicasResult{Nodes: cfg.Nodes, Replicas: replicas, Each: make([]ReplicaResult, replicas)}

	// Shares, read from the election Leases.
	shares := func() ([]int, int, error) {
		list, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, err
		}
		held, free := make([]int, replicas), cfg.Nodes
		for _, l := range list.Items {
			if !strings.HasPrefix(l.Name, "vkubelet-bench-node-") {
				continue
			}
			if i, ok := ids[ptr.Deref(l.Spec.HolderIdentity, "")]; ok {
				held[i]++
				free--
			}
		}
		return held, free, nil
	}
	spread := func(held []int, free int) bool {
		lo, hi := cfg.Nodes/replicas, (cfg.Nodes+replicas-1)/replicas
		return free == 0 && slices.Min(held) >= lo && slices.Max(held) <= hi
	}
	last := time.Time{}
	for {
		held, free, err := shares()
		if err != nil {
			return nil, err
		}
		if spread(held, free) {
			break
		}
		if time.Since(last) > 5*time.Second {
			fmt.Fprintf(cfg.Log, "bench: replicas hold %v of %d nodes (%d free) after %s\n", held, cfg.Nodes, free, time.Since(began).Round(time.Second))
			last = time.Now()
		}
		if time.Since(began) > 10*time.Minute {
			return nil, fmt.Errorf("nodes not spread after 10 minutes: %v held, %d free", held, free)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	res.SpreadSeconds = time.Since(began).Seconds()
	for i, p := range procs {
		u, err := p.proc.Usage()
		if err != nil {
			return nil, err
		}
		res.Each[i].Pid, res.Each[i].CPUSecondsToSpread = p.proc.Cmd.Process.Pid, u.CPUSeconds
	}
	fmt.Fprintf(cfg.Log, "bench: %d nodes spread over %d replicas after %.1fs; waiting for every Node to be Ready\n", cfg.Nodes, replicas, res.SpreadSeconds)
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		ready := 0
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, "bench-node-") && nodeIsReady(&n) {
				ready++
			}
		}
		if ready == cfg.Nodes {
			break
		}
		if time.Since(began) > 10*time.Minute {
			return nil, fmt.Errorf("%d of %d nodes Ready after 10 minutes", ready, cfg.Nodes)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	res.ReadySeconds = time.Since(began).Seconds()
	fmt.Fprintf(cfg.Log, "bench: every Node Ready after %.1fs; watching them idle for %s\n", res.ReadySeconds, cfg.NodeIdle)

	before := make([]proc.Usage, replicas)
	for i, p := range procs {
		if before[i], err = p.proc.Usage(); err != nil {
			return nil, err
		}
	}
	leasesBefore, err := leaseRequests(ctx, cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.NodeIdle):
	}
	window := time.Since(start).Seconds()
	leasesAfter, err := leaseRequests(ctx, cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	res.WindowSeconds = window
	res.LeaseRequestsPerS = map[string]float64{}
	for verb, v := range leasesAfter {
		res.LeaseRequestsPerS[verb] = (v - leasesBefore[verb]) / window
	}
	held, _, err := shares()
	if err != nil {
		return nil, err
	}
	for i, p := range procs {
		u, err := p.proc.Usage()
		if err != nil {
			return nil, err
		}
		e := &res.Each[i]
		e.Nodes, e.RSSMiB, e.PeakMiB = held[i], u.RSSMiB, u.PeakMiB
		e.CPUPercent = 100 * (u.CPUSeconds - before[i].CPUSeconds) / window
	}
	return res, nil
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// leaseRequests is the API server's count of requests on Leases, by verb.
func leaseRequests(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	err = proc.Scrape(ctx, hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics", func(name string, l map[string]string, v float64) {
		if name == "apiserver_request_total" && l["resource"] == "leases" {
			out[l["verb"]] += v
		}
	})
	return out, err
}
