// Package bench measures how many pods a virtual node starts and stops, how fast and
// at what cost, next to the ceiling of the same API server measured in the same run:
// the rate at which a plain client can do the minimum writes a pod start needs.
// Optionally kwok, another node simulator, is measured the same way on a second
// node of the same cluster in the same run.
//
// The node agent runs as a child process (the vkubelet binary itself) with the mock
// provider, so its memory and CPU are its own; its API requests are read from its
// metrics endpoint. By default the pods are shaped as a Deployment's, token
// volume included (see PodShape). RunSlurm and RunCRI instead compare a
// provider's raw back end (sbatch, the CRI) with the same pods through a node
// with that provider. `vkubeletctl bench` runs them; docs/PERFORMANCE.md records
// figures.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// Config says what to measure.
type Config struct {
	Pods int // pods to start and stop
	// Nodes is how many nodes each implementation runs in its one process
	// (default 1); the pods are bound to them in turn.
	Nodes int
	// NodeIdle is how long the nodes' API writes and live heap are watched
	// before any pod is created, for the idle cost of a node (default 30s with
	// more than one node, else none).
	NodeIdle    time.Duration
	Rate        float64 // offered pod creations per second; 0 = as fast as Concurrency allows
	Concurrency int     // parallel creators (default 50)
	// Shape is the kind of pod created, in every phase (default ShapeDeployment).
	Shape PodShape
	// Kubeconfig and RESTConfig name the cluster; the caller starts one if needed.
	Kubeconfig string
	RESTConfig *rest.Config
	// Binary is the vkubelet executable run as the node agent.
	Binary string
	// AgentArgs are extra flags for the agent (e.g. --kube-api-qps).
	AgentArgs []string
	// HeapProfiles, if set, is a directory where the heap profiles taken with
	// the live heap figures are saved, as KIND-idle.heap (before the pods) and
	// KIND-pods.heap (with them Running), KIND naming the node as the results
	// do (vkubelet, kwok, ...); each run overwrites the last one's.
	HeapProfiles string
	// AgentEnv are extra NAME=value environment variables for the agent (e.g.
	// GOGC=50), on top of the benchmark's own environment.
	AgentEnv []string
	// KwokBinary, if set, is a kwok executable measured on a second node of the
	// same cluster, in the same run and the same way as the agent; KwokStages is
	// its configuration file of stages.
	KwokBinary string
	KwokStages string
	// Remote, if set, also measures the agent with the mock behind the provider
	// protocol (a provider process on a unix socket), on a node of its own, before
	// or after the agent with the mock in process as RemoteFirst says (a caller
	// of several runs alternates it: the node measured second meets an API server
	// slowed by the first's run, by up to 60 % on this machine).
	Remote      bool
	RemoteFirst bool
	// UpstreamNode, if set, is a vkubelet with upstream virtual-kubelet's mock
	// compiled in through the adapter (internal/lab/upstreammock's Node), measured
	// on a node of its own next to the agent with vkubelet's mock, the two in
	// the order UpstreamFirst says (a caller of several runs alternates it, so
	// that the API server's slowing through a run favours neither).
	UpstreamNode  string
	UpstreamFirst bool
	// UpstreamEngine, if set, is upstream virtual-kubelet's own command, run with
	// its mock and measured last, with UpstreamEnginePods pods (default Pods):
	// its client is paced at client-go's default 5 requests a second, so its
	// rates hardly depend on the count.
	UpstreamEngine     string
	UpstreamEnginePods int
	// Idle, if set, is how long each node's pods run untouched once all are
	// Running, its API writes counted meanwhile: the steady cost of an idle
	// node, leases and token refreshes (which start 15% into a token's lifetime,
	// 9 minutes for the admission plugin's one-hour tokens).
	Idle time.Duration
	Log  io.Writer
}

// Result holds the figures of one run. JSON names are the documented fields; the
// node agent's figures are at the top level, kwok's (with --compare kwok) under
// "kwok".
type Result struct {
	Pods        int      `json:"pods"`
	PodShape    PodShape `json:"pod_shape"`
	OfferedRate float64  `json:"offered_rate,omitempty"`
	// CeilingPodsPerS is the mean of the ceilings measured before and after the
	// nodes' runs; CeilingDeletePodsPerS likewise for deletion.
	CeilingPodsPerS       float64 `json:"ceiling_pods_per_s"`
	CeilingBefore         float64 `json:"ceiling_before_pods_per_s"`
	CeilingAfter          float64 `json:"ceiling_after_pods_per_s"`
	CeilingDeletePodsPerS float64 `json:"ceiling_delete_pods_per_s"`
	// CeilingWritesPerPod are the ceiling client's writes per pod start, the create
	// aside: the status write and one TokenRequest per token the pod mounts.
	CeilingWritesPerPod float64 `json:"ceiling_writes_per_pod"`
	NodeResult
	Kwok *NodeResult `json:"kwok,omitempty"`
	// Remote holds the agent's figures with the mock behind the provider protocol.
	Remote *NodeResult `json:"remote,omitempty"`
	// UpstreamMock holds the figures of upstream's mock on vkubelet's engine
	// (through the adapter), UpstreamEngine those of the same mock on upstream's.
	UpstreamMock   *NodeResult `json:"upstream_mock,omitempty"`
	UpstreamEngine *NodeResult `json:"upstream_engine,omitempty"`
	// UpstreamEnginePods is how many pods upstream's engine was measured with.
	UpstreamEnginePods int     `json:"upstream_engine_pods,omitempty"`
	DurationSeconds    float64 `json:"duration_s"`
	CeilingSeconds     float64 `json:"ceiling_s"`
	AgentQPS           string  `json:"agent_flags,omitempty"`
	// Runs holds each run's figures when the result is the median of several.
	Runs []*Result `json:"runs,omitempty"`
}

// NodeResult holds the figures of one node implementation.
type NodeResult struct {
	PodsPerS       float64 `json:"pods_per_s"`
	RatioToCeiling float64 `json:"ratio_to_ceiling"`
	P50ms          float64 `json:"p50_ms"`
	P90ms          float64 `json:"p90_ms"`
	P99ms          float64 `json:"p99_ms"`
	// WritesPerPod are the node's API writes per pod start, from the first create
	// until 2 s after the last pod is Running (lease renewals in that time included).
	WritesPerPod float64            `json:"writes_per_pod"`
	WritesByKind map[string]float64 `json:"writes_per_pod_by_kind"`
	// DeleteWritesByKind are the agent's API writes per pod deleted, by kind,
	// counted from the start of the deletions to 2 s after the last (not for kwok).
	DeleteWritesByKind map[string]float64 `json:"writes_per_pod_delete_by_kind,omitempty"`
	// WritesCountedBy says who counted them: "agent" (its own
	// vkubelet_api_requests_total) or "apiserver" (apiserver_request_total, less
	// the benchmark's own writes).
	WritesCountedBy string `json:"writes_counted_by"`
	// PodWatches are the pod watches the agent opened from the first create
	// until 2 s after the last pod is Running: 0 when its watch lasted the
	// burst (not for kwok).
	PodWatches   *float64 `json:"pod_watches_during_starts,omitempty"`
	IdleRSSMiB   float64  `json:"idle_rss_mib"`
	PeakRSSMiB   float64  `json:"peak_rss_mib"`
	RSSGrowthMiB float64  `json:"rss_growth_mib"`
	// The RSS idle and with the pods Running (idle + growth), split into
	// anonymous memory (heap, stacks, runtime) and file-backed pages (the
	// binary's code and read-only data): the two compare differently between
	// implementations, and only the first grows with pods.
	IdleAnonMiB float64 `json:"idle_rss_anon_mib"`
	IdleFileMiB float64 `json:"idle_rss_file_mib"`
	AnonMiB     float64 `json:"rss_anon_mib"`
	FileMiB     float64 `json:"rss_file_mib"`
	// HeapGrowthMiB is the growth of the process's live heap (after a forced GC)
	// from idle to all pods Running: what it keeps per pod, apart from the
	// garbage collector's headroom, which RSS includes. NoHeap says it could not
	// be read (a process that serves no pprof heap profile).
	HeapGrowthMiB float64 `json:"heap_growth_mib"`
	NoHeap        bool    `json:"no_heap,omitempty"`
	CPUSeconds    float64 `json:"cpu_s"`
	// ProviderCPUSeconds is the CPU of the provider's own process behind the
	// agent (the protocol's node), over the same time as CPUSeconds; 0 for a
	// node without one.
	ProviderCPUSeconds float64 `json:"provider_cpu_s,omitempty"`
	DeletePodsPerS     float64 `json:"delete_pods_per_s"`
	DeleteP99ms        float64 `json:"delete_p99_ms"`
	CreateSeconds      float64 `json:"create_s"`
	DeleteSeconds      float64 `json:"delete_s"`
	// With Config.Idle: the node's API writes per second by kind over the idle
	// time, and the highest total of any one minute of it.
	IdleWritesPerS          map[string]float64 `json:"idle_writes_per_s,omitempty"`
	IdleMaxMinuteWritesPerS float64            `json:"idle_max_minute_writes_per_s,omitempty"`
	// With Config.NodeIdle: the nodes before any pod, per node. The live heap
	// is the process's divided by the nodes (its fixed part included); the
	// writes are Lease writes per 10 s and Node writes per minute.
	Nodes                     int     `json:"nodes,omitempty"`
	IdleHeapKiBPerNode        float64 `json:"idle_heap_kib_per_node,omitempty"`
	IdleLeaseWritesPer10sNode float64 `json:"idle_lease_writes_per_10s_per_node,omitempty"`
	IdleNodeWritesPerMinNode  float64 `json:"idle_node_writes_per_min_per_node,omitempty"`
	IdleOtherWritesPerMinNode float64 `json:"idle_other_writes_per_min_per_node,omitempty"`
}

// Run measures the ceiling, then kwok if asked, then the node agent, then the
// ceiling again. kwok goes before the agent: the API server slows down as etcd's
// history grows, so the order favours kwok, never the agent.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Shape == "" {
		cfg.Shape = ShapeDeployment
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	if cfg.Nodes > 1 && cfg.NodeIdle == 0 {
		cfg.NodeIdle = 30 * time.Second
	}
	if cfg.Nodes > 1 && cfg.Remote {
		return nil, errors.New("the provider protocol's node is measured alone: --nodes above 1 with --compare remote is not supported")
	}
	client, err := loadClient(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	caPEM := caBundle(cfg.RESTConfig)
	res := &Result{Pods: cfg.Pods, PodShape: cfg.Shape, OfferedRate: cfg.Rate, AgentQPS: strings.Join(cfg.AgentArgs, " ")}
	began := time.Now()

	fmt.Fprintf(cfg.Log, "bench: ceiling: %d %s pods by a plain client (create bound pod, TokenRequest per token, status to Running; then delete), %d at a time\n",
		cfg.Pods, cfg.Shape, cfg.Concurrency)
	ceilingStart := time.Now()
	before, err := measureCeiling(ctx, client, cfg, caPEM)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingBefore, res.CeilingWritesPerPod, res.CeilingSeconds = before.podsPerS, before.writesPerPod, time.Since(ceilingStart).Seconds()
	fmt.Fprintf(cfg.Log, "bench: ceiling %.1f pods/s, delete %.1f pods/s\n", before.podsPerS, before.deletePodsPerS)

	if cfg.KwokBinary != "" {
		if res.Kwok, err = measureStarted(ctx, client, cfg, caPEM, "apiserver", func() (*node, error) { return startKwok(ctx, client, cfg) }); err != nil {
			return nil, err
		}
	}

	upstreamMock := func() error {
		if cfg.UpstreamNode == "" {
			return nil
		}
		r, err := measureStarted(ctx, client, cfg, caPEM, "agent", func() (*node, error) { return startUpstreamMock(ctx, cfg) })
		res.UpstreamMock = r
		return err
	}
	remote := func() error {
		if !cfg.Remote {
			return nil
		}
		r, err := measureStarted(ctx, client, cfg, caPEM, "agent", func() (*node, error) { return startRemoteAgent(ctx, cfg) })
		res.Remote = r
		return err
	}
	if cfg.RemoteFirst {
		if err := remote(); err != nil {
			return nil, err
		}
	}
	if cfg.UpstreamFirst {
		if err := upstreamMock(); err != nil {
			return nil, err
		}
	}
	r, err := measureStarted(ctx, client, cfg, caPEM, "agent", func() (*node, error) { return startAgent(ctx, cfg) })
	if err != nil {
		return nil, err
	}
	res.NodeResult = *r
	if !cfg.UpstreamFirst {
		if err := upstreamMock(); err != nil {
			return nil, err
		}
	}
	if !cfg.RemoteFirst {
		if err := remote(); err != nil {
			return nil, err
		}
	}
	if cfg.UpstreamEngine != "" {
		engineCfg := cfg
		if cfg.UpstreamEnginePods > 0 {
			engineCfg.Pods = cfg.UpstreamEnginePods
		}
		res.UpstreamEnginePods = engineCfg.Pods
		if res.UpstreamEngine, err = measureStarted(ctx, client, engineCfg, caPEM, "apiserver", func() (*node, error) { return startUpstreamEngine(ctx, client, cfg) }); err != nil {
			return nil, err
		}
	}

	// The API server slows down as etcd's history grows during a run, so the
	// ceiling is measured again now and the two are averaged: neither the ceiling
	// nor the nodes get the fresher server.
	fmt.Fprintf(cfg.Log, "bench: ceiling again, after the nodes' runs\n")
	ceilingStart = time.Now()
	after, err := measureCeiling(ctx, client, cfg, caPEM)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingSeconds += time.Since(ceilingStart).Seconds()
	fmt.Fprintf(cfg.Log, "bench: ceiling %.1f pods/s, delete %.1f pods/s\n", after.podsPerS, after.deletePodsPerS)
	res.CeilingAfter = after.podsPerS
	res.CeilingPodsPerS = (res.CeilingBefore + res.CeilingAfter) / 2
	res.CeilingDeletePodsPerS = (before.deletePodsPerS + after.deletePodsPerS) / 2
	res.RatioToCeiling = res.PodsPerS / res.CeilingPodsPerS
	for _, other := range []*NodeResult{res.Kwok, res.Remote, res.UpstreamMock, res.UpstreamEngine} {
		if other != nil {
			other.RatioToCeiling = other.PodsPerS / res.CeilingPodsPerS
		}
	}
	res.DurationSeconds = time.Since(began).Seconds()
	return res, nil
}

// measureStarted starts a node with start, measures it, stops it, and says who
// counted its writes ("agent" or "apiserver").
func measureStarted(ctx context.Context, c kubernetes.Interface, cfg Config, caPEM []byte, countedBy string, start func() (*node, error)) (*NodeResult, error) {
	n, err := start()
	if err != nil {
		return nil, err
	}
	r, err := measureNode(ctx, c, cfg, n, caPEM)
	n.stop()
	if err != nil {
		return nil, err
	}
	r.WritesCountedBy = countedBy
	return r, nil
}

// loadClient is the benchmark's own client of the cluster of rc. The load
// generator must never be the bottleneck: no client-side rate limit (client-go's
// default, 5 requests a second after a burst of 10, would pace pod creations).
// It talks protobuf, as the node agent does by default (--kube-api-content-type).
func loadClient(rc *rest.Config) (*kubernetes.Clientset, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = -1, 0
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(rc)
}

// namespaceName is a new namespace name for one phase of a run.
func namespaceName(phase string) string {
	return "bench-" + phase + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
}

// measureNode measures one node implementation, already started: it waits for
// its Node to be Ready, creates cfg.Pods pods bound to it and observes them
// Running, then deletes them all and observes them gone, reading the process's
// memory, CPU and API writes in between.
func measureNode(ctx context.Context, c kubernetes.Interface, cfg Config, n *node, caPEM []byte) (*NodeResult, error) {
	for _, name := range n.names {
		if err := waitNodeReady(ctx, c, name, n.registeredIsReady); err != nil {
			return nil, n.failed(err)
		}
	}
	ns := namespaceName(n.kind)
	tmpl, err := prepareNamespace(ctx, c, ns, cfg.Shape, caPEM)
	if err != nil {
		return nil, err
	}
	defer c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	obs := observe(c, ns)
	defer close(obs.stop)
	time.Sleep(2 * time.Second) // let start-up requests (lease, node status, informers) settle
	r := &NodeResult{}
	if cfg.NodeIdle > 0 {
		// Before the idle figures below: many nodes take longer to settle
		// (serving certificates, first status writes) than one.
		if err := idleNodes(ctx, cfg, n, r); err != nil {
			return nil, n.failed(err)
		}
	}
	idle, err := n.proc.Usage()
	if err != nil {
		return nil, err
	}
	var providerIdle proc.Usage
	if n.provider != nil {
		if providerIdle, err = n.provider.Usage(); err != nil {
			return nil, err
		}
	}
	before, err := n.writes(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	watchesBefore, err := n.countPodWatches(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	var idleHeap float64
	r.NoHeap = n.metricsURL == ""
	if !r.NoHeap {
		if idleHeap, err = proc.LiveHeapMiB(ctx, n.metricsURL, heapProfile(cfg, n.kind, "idle")); err != nil {
			return nil, n.failed(err)
		}
	}
	r.IdleRSSMiB, r.IdleAnonMiB, r.IdleFileMiB = idle.RSSMiB, idle.AnonMiB, idle.FileMiB
	if r.Nodes > 0 {
		r.IdleHeapKiBPerNode = idleHeap * 1024 / float64(r.Nodes)
	}

	fmt.Fprintf(cfg.Log, "bench: %s: creating %d pods on %s\n", n.kind, cfg.Pods, nodesText(n.names))
	createStart := time.Now()
	lat, span, err := startPods(ctx, c, obs, cfg, tmpl, ns, n.names)
	if err != nil {
		return nil, n.failed(err)
	}
	r.CreateSeconds = time.Since(createStart).Seconds()
	r.PodsPerS = float64(cfg.Pods) / span.Seconds()
	r.P50ms, r.P90ms, r.P99ms = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
	time.Sleep(2 * time.Second) // trailing status writes
	after, err := n.writes(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	watchesAfter, err := n.countPodWatches(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	if n.podWatches != nil {
		r.PodWatches = ptr.To(watchesAfter - watchesBefore)
	}
	r.WritesByKind = writesPerPod(before, after, n.benchWrites, cfg.Pods)
	for _, v := range r.WritesByKind {
		r.WritesPerPod += v
	}
	used, err := n.proc.Usage()
	if err != nil {
		return nil, err
	}
	r.RSSGrowthMiB = used.RSSMiB - idle.RSSMiB
	r.AnonMiB, r.FileMiB = used.AnonMiB, used.FileMiB
	// What the process keeps per pod, not what it holds while it still works
	// through the burst's last events (watch data not yet read, notifications
	// and queue items waiting: 0.1 to 0.5 KiB per pod in single runs).
	if err := proc.WaitQuiet(ctx, n.proc, proc.QuietCPU, proc.QuietWait); err != nil {
		return nil, n.failed(err)
	}
	if !r.NoHeap {
		usedHeap, err := proc.LiveHeapMiB(ctx, n.metricsURL, heapProfile(cfg, n.kind, "pods"))
		if err != nil {
			return nil, n.failed(err)
		}
		r.HeapGrowthMiB = usedHeap - idleHeap
	}
	if cfg.Idle > 0 {
		if r.IdleWritesPerS, r.IdleMaxMinuteWritesPerS, err = idleWrites(ctx, n, cfg.Idle, cfg.Log); err != nil {
			return nil, n.failed(err)
		}
	}

	fmt.Fprintf(cfg.Log, "bench: %s: deleting %d pods\n", n.kind, cfg.Pods)
	beforeDelete, err := n.writes(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	deleteStart := time.Now()
	dlat, dspan, err := deletePods(ctx, c, obs, cfg, tmpl, ns)
	if err != nil {
		return nil, n.failed(err)
	}
	time.Sleep(2 * time.Second) // trailing writes
	afterDelete, err := n.writes(ctx)
	if err != nil {
		return nil, n.failed(err)
	}
	if n.benchWrites == nil {
		// Counted by the agent itself; from the API server's counts (kwok) the
		// benchmark's own deletions could not be told from the node's.
		r.DeleteWritesByKind = writesPerPod(beforeDelete, afterDelete, nil, cfg.Pods)
	}
	r.DeleteSeconds = time.Since(deleteStart).Seconds()
	r.DeletePodsPerS = float64(cfg.Pods) / dspan.Seconds()
	r.DeleteP99ms = percentile(dlat, 99)
	final, err := n.proc.Usage()
	if err != nil {
		return nil, err
	}
	r.PeakRSSMiB, r.CPUSeconds = final.PeakMiB, final.CPUSeconds-idle.CPUSeconds
	if n.provider != nil {
		providerFinal, err := n.provider.Usage()
		if err != nil {
			return nil, err
		}
		r.ProviderCPUSeconds = providerFinal.CPUSeconds - providerIdle.CPUSeconds
	}
	fmt.Fprintf(cfg.Log, "bench: %s: %.1f pods/s, delete %.1f pods/s\n", n.kind, r.PodsPerS, r.DeletePodsPerS)
	return r, nil
}

// idleWrites lets the node's pods run untouched for d and returns its API writes
// per second by kind over that time, and the highest total rate of any minute.
func idleWrites(ctx context.Context, n *node, d time.Duration, log io.Writer) (map[string]float64, float64, error) {
	start, err := n.writes(ctx)
	if err != nil {
		return nil, 0, err
	}
	fmt.Fprintf(log, "bench: %s: pods left running for %s, API writes counted every minute\n", n.kind, d)
	prev, maxMinute := start, 0.0
	for end := time.Now().Add(d); time.Now().Before(end); {
		step := min(time.Minute, time.Until(end))
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(step):
		}
		cur, err := n.writes(ctx)
		if err != nil {
			return nil, 0, err
		}
		total := 0.0
		for k, v := range cur {
			total += v - prev[k]
		}
		if step >= 30*time.Second {
			maxMinute = max(maxMinute, total/step.Seconds())
		}
		fmt.Fprintf(log, "bench: %s: idle: %.2f writes/s\n", n.kind, total/step.Seconds())
		prev = cur
	}
	perS := map[string]float64{}
	for k, v := range prev {
		if w := v - start[k]; w > 0 {
			perS[k] = w / d.Seconds()
		}
	}
	return perS, maxMinute, nil
}

// idleNodes watches the nodes' API writes for cfg.NodeIdle before any pod is
// created and records their writes per node in r.
func idleNodes(ctx context.Context, cfg Config, n *node, r *NodeResult) error {
	fmt.Fprintf(cfg.Log, "bench: %s: %d idle nodes watched for %s\n", n.kind, len(n.names), cfg.NodeIdle)
	before, err := n.writes(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.NodeIdle):
	}
	after, err := n.writes(ctx)
	if err != nil {
		return err
	}
	nodes := float64(len(n.names))
	r.Nodes = len(n.names)
	for k, v := range after {
		w := (v - before[k]) / nodes
		switch {
		case strings.HasSuffix(k, " leases"):
			r.IdleLeaseWritesPer10sNode += w * 10 / cfg.NodeIdle.Seconds()
		case strings.HasSuffix(k, " nodes") || strings.HasSuffix(k, " nodes/status"):
			r.IdleNodeWritesPerMinNode += w * 60 / cfg.NodeIdle.Seconds()
		default:
			r.IdleOtherWritesPerMinNode += w * 60 / cfg.NodeIdle.Seconds()
		}
	}
	return nil
}

// nodesText names nodes for the log: the one, or the first and last of many.
func nodesText(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%d nodes (%s … %s)", len(names), names[0], names[len(names)-1])
}

// writesPerPod turns two readings of a write counter into writes per pod by kind,
// less the writes the benchmark made itself (ours, per pod).
func writesPerPod(before, after, ours map[string]float64, pods int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		d := v - before[k] - ours[k]*float64(pods)
		if d > 0 {
			out[k] = d / float64(pods)
		}
	}
	return out
}

// forEach runs fn for i in [0,n) with the configured concurrency and offered rate.
func forEach(ctx context.Context, cfg Config, n int, fn func(i int) error) error {
	var limiter *rate.Limiter
	if cfg.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	}
	next := make(chan int)
	errc := make(chan error, cfg.Concurrency)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		if limiter != nil {
			if err := limiter.Wait(ctx); err != nil {
				break
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// waitNodeReady waits for the Node name to be Ready, or only to exist if
// registered is set.
func waitNodeReady(ctx context.Context, c kubernetes.Interface, name string, registered bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && registered {
			return nil
		}
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("node %s not Ready", name)
}

// heapProfile is where the heap profile of node kind kind taken at phase goes, or
// "" for none.
func heapProfile(cfg Config, kind, phase string) string {
	if cfg.HeapProfiles == "" {
		return ""
	}
	return filepath.Join(cfg.HeapProfiles, kind+"-"+phase+".heap")
}
