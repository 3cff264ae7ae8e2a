// Package bench measures how many pods a virtual node starts and stops, how fast and
// at what cost, next to the ceiling of the same API server measured in the same run:
// the rate at which a plain client can do the minimum writes a pod start needs.
//
// The node agent runs as a child process (the vkubelet binary itself) with the mock
// provider, so its memory and CPU are its own; its API requests are read from its
// metrics endpoint. `vkubelet bench` runs it; docs/PERFORMANCE.md records figures.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Config says what to measure.
type Config struct {
	Pods        int     // pods to start and stop
	Rate        float64 // offered pod creations per second; 0 = as fast as Concurrency allows
	Concurrency int     // parallel creators (default 50)
	// Kubeconfig and RESTConfig name the cluster; the caller starts one if needed.
	Kubeconfig string
	RESTConfig *rest.Config
	// Binary is the vkubelet executable run as the node agent.
	Binary string
	// AgentArgs are extra flags for the agent (e.g. --kube-api-qps).
	AgentArgs []string
	// AgentEnv are extra NAME=value environment variables for the agent (e.g.
	// GOGC=50), on top of the benchmark's own environment.
	AgentEnv []string
	Log      io.Writer
}

// Result holds the figures of one run. JSON names are the documented fields.
type Result struct {
	Pods        int     `json:"pods"`
	OfferedRate float64 `json:"offered_rate,omitempty"`
	// CeilingPodsPerS is the mean of the ceilings measured before and after the
	// node's run.
	CeilingPodsPerS float64            `json:"ceiling_pods_per_s"`
	CeilingBefore   float64            `json:"ceiling_before_pods_per_s"`
	CeilingAfter    float64            `json:"ceiling_after_pods_per_s"`
	PodsPerS        float64            `json:"pods_per_s"`
	RatioToCeiling  float64            `json:"ratio_to_ceiling"`
	P50ms           float64            `json:"p50_ms"`
	P90ms           float64            `json:"p90_ms"`
	P99ms           float64            `json:"p99_ms"`
	WritesPerPod    float64            `json:"writes_per_pod"`
	WritesByKind    map[string]float64 `json:"writes_per_pod_by_kind"`
	IdleRSSMiB      float64            `json:"idle_rss_mib"`
	PeakRSSMiB      float64            `json:"peak_rss_mib"`
	RSSGrowthMiB    float64            `json:"rss_growth_mib"`
	// HeapGrowthMiB is the growth of the agent's live heap (after a forced GC)
	// from idle to all pods Running: what it keeps per pod, apart from the
	// garbage collector's headroom, which RSS includes.
	HeapGrowthMiB   float64 `json:"heap_growth_mib"`
	CPUSeconds      float64 `json:"cpu_s"`
	DeletePodsPerS  float64 `json:"delete_pods_per_s"`
	DeleteP99ms     float64 `json:"delete_p99_ms"`
	DurationSeconds float64 `json:"duration_s"`
	CeilingSeconds  float64 `json:"ceiling_s"`
	CreateSeconds   float64 `json:"create_s"`
	DeleteSeconds   float64 `json:"delete_s"`
	AgentQPS        string  `json:"agent_flags,omitempty"`
	// Runs holds each run's figures when the result is the median of several.
	Runs []*Result `json:"runs,omitempty"`
}

// Run measures the ceiling, then the node agent, then the ceiling again.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	restCfg := rest.CopyConfig(cfg.RESTConfig)
	// The load generator must never be the bottleneck, and the ceiling's client
	// talks protobuf, as the node agent does by default (--kube-api-content-type).
	restCfg.QPS, restCfg.Burst = -1, 0
	restCfg.ContentType = runtime.ContentTypeProtobuf
	restCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Pods: cfg.Pods, OfferedRate: cfg.Rate, AgentQPS: strings.Join(cfg.AgentArgs, " ")}
	began := time.Now()

	fmt.Fprintf(cfg.Log, "bench: ceiling: %d pods by a plain client (create bound pod + status to Running), %d at a time\n", cfg.Pods, cfg.Concurrency)
	ceilingStart := time.Now()
	// The ceiling is what the API server can do, so it is measured flat out, whatever
	// rate is offered to the node.
	flatOut := cfg
	flatOut.Rate = 0
	ceiling, err := measureCeiling(ctx, client, flatOut)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingBefore, res.CeilingSeconds = ceiling, time.Since(ceilingStart).Seconds()
	fmt.Fprintf(cfg.Log, "bench: ceiling %.1f pods/s\n", ceiling)

	agent, err := startAgent(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer agent.stop()
	if err := waitNodeReady(ctx, client, agent.node); err != nil {
		return nil, fmt.Errorf("%w; agent log:\n%s", err, agent.tail())
	}
	time.Sleep(2 * time.Second) // let start-up requests (lease, node status, informer) settle
	idle, err := agent.usage()
	if err != nil {
		return nil, err
	}
	before, err := agent.requests()
	if err != nil {
		return nil, err
	}
	res.IdleRSSMiB = idle.rssMiB
	idleHeap, err := agent.liveHeapMiB()
	if err != nil {
		return nil, err
	}

	ns := "bench-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})

	fmt.Fprintf(cfg.Log, "bench: node agent: creating %d pods on %s\n", cfg.Pods, agent.node)
	createStart := time.Now()
	obs := observe(client, ns)
	defer close(obs.stop)
	lat, span, err := startPods(ctx, client, obs, cfg, ns, agent.node)
	if err != nil {
		return nil, fmt.Errorf("%w; agent log:\n%s", err, agent.tail())
	}
	res.CreateSeconds = time.Since(createStart).Seconds()
	res.PodsPerS = float64(cfg.Pods) / span.Seconds()
	res.P50ms, res.P90ms, res.P99ms = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
	time.Sleep(2 * time.Second) // trailing status writes
	after, err := agent.requests()
	if err != nil {
		return nil, err
	}
	res.WritesByKind = map[string]float64{}
	for k, v := range after {
		verb, _, _ := strings.Cut(k, " ")
		if verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		if d := v - before[k]; d > 0 {
			res.WritesByKind[k] = d / float64(cfg.Pods)
			res.WritesPerPod += d / float64(cfg.Pods)
		}
	}
	used, err := agent.usage()
	if err != nil {
		return nil, err
	}
	res.RSSGrowthMiB = used.rssMiB - idle.rssMiB
	usedHeap, err := agent.liveHeapMiB()
	if err != nil {
		return nil, err
	}
	res.HeapGrowthMiB = usedHeap - idleHeap

	fmt.Fprintf(cfg.Log, "bench: deleting %d pods\n", cfg.Pods)
	deleteStart := time.Now()
	dlat, dspan, err := deletePods(ctx, client, obs, cfg, ns)
	if err != nil {
		return nil, fmt.Errorf("%w; agent log:\n%s", err, agent.tail())
	}
	res.DeleteSeconds = time.Since(deleteStart).Seconds()
	res.DeletePodsPerS = float64(cfg.Pods) / dspan.Seconds()
	res.DeleteP99ms = percentile(dlat, 99)
	final, err := agent.usage()
	if err != nil {
		return nil, err
	}
	res.PeakRSSMiB, res.CPUSeconds = final.peakMiB, final.cpuSeconds-idle.cpuSeconds

	// The API server slows down as etcd's history grows during a run, so the
	// ceiling is measured again now and the two are averaged: neither the ceiling
	// nor the node gets the fresher server.
	fmt.Fprintf(cfg.Log, "bench: ceiling again, after the node's run\n")
	ceilingStart = time.Now()
	if res.CeilingAfter, err = measureCeiling(ctx, client, flatOut); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingSeconds += time.Since(ceilingStart).Seconds()
	fmt.Fprintf(cfg.Log, "bench: ceiling %.1f pods/s\n", res.CeilingAfter)
	res.CeilingPodsPerS = (res.CeilingBefore + res.CeilingAfter) / 2
	res.RatioToCeiling = res.PodsPerS / res.CeilingPodsPerS
	res.DurationSeconds = time.Since(began).Seconds()
	return res, nil
}

func benchPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
			AutomountServiceAccountToken:  ptr.To(false),
		},
	}
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

// measureCeiling does what a node agent must at least do per pod start — the
// scheduler's bound create aside, one status write — with a plain client, and
// returns pods per second. Completion is observed the way the node agent's is: by
// the same kind of observer, watching for Running, so both figures include the
// cost of the measuring watch. The status written is the one a kubelet writes for
// a started one-container pod (conditions, container status, addresses, start
// time), not a token one, so the API server does comparable work per write. The
// pods are removed afterwards.
func measureCeiling(ctx context.Context, c kubernetes.Interface, cfg Config) (float64, error) {
	ns := "bench-ceiling-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	defer c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	obs := observe(c, ns)
	defer close(obs.stop)
	// Pipelined like a node: creators hand each created pod to a pool of status
	// writers, as the scheduler's binds reach a kubelet's workers, so the API
	// server has creates and status writes in flight at once.
	created := make(chan *corev1.Pod, cfg.Pods)
	writeErr := make(chan error, 1)
	var writers sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for p := range created {
				patch, err := runningStatusPatch(p, time.Now())
				if err == nil {
					_, err = c.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
				}
				if err != nil {
					select {
					case writeErr <- err:
					default:
					}
				}
			}
		}()
	}
	asked, err := timed(ctx, cfg, func(name string) error {
		p, err := c.CoreV1().Pods(ns).Create(ctx, benchPod(name, "bench-ceiling"), metav1.CreateOptions{})
		if err == nil {
			created <- p
		}
		return err
	})
	close(created)
	writers.Wait()
	if err == nil {
		select {
		case err = <-writeErr:
		default:
		}
	}
	if err != nil {
		return 0, err
	}
	if err := obs.waitFor(ctx, obs.running, cfg.Pods, podTimeout(cfg.Pods), "Running"); err != nil {
		return 0, err
	}
	_, span := obs.latencies(asked, obs.running)
	_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	return float64(cfg.Pods) / span.Seconds(), nil
}

// runningStatusPatch is the status write that takes a just-created pod to Running
// as a kubelet would report it: the four standard conditions, one running
// container per spec container, host and pod addresses, start time.
func runningStatusPatch(p *corev1.Pod, now time.Time) ([]byte, error) {
	t := metav1.NewTime(now.Truncate(time.Second))
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "10.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "10.0.0.1"}},
		PodIP:     "10.0.0.2",
		PodIPs:    []corev1.PodIP{{IP: "10.0.0.2"}},
		StartTime: &t,
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	for _, ctr := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true, Started: ptr.To(true),
			ContainerID: "bench://" + string(p.UID) + "/" + ctr.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": st})
}

// observer records, from an informer on the benchmark's namespace, when each pod was
// first seen Running and when it disappeared. An informer rather than a bare watch:
// it survives the API server closing a watch, which happens over long runs.
type observer struct {
	mu      sync.Mutex
	running map[string]time.Time
	gone    map[string]time.Time
	changed chan struct{}
	stop    chan struct{}
}

func observe(c kubernetes.Interface, ns string) *observer {
	o := &observer{running: map[string]time.Time{}, gone: map[string]time.Time{},
		changed: make(chan struct{}, 1), stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
			o.record(o.running, p.Name)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				o.record(o.gone, p.Name)
			}
		},
	})
	factory.Start(o.stop)
	factory.WaitForCacheSync(o.stop)
	return o
}

func (o *observer) record(m map[string]time.Time, name string) {
	o.mu.Lock()
	if _, ok := m[name]; !ok {
		m[name] = time.Now()
	}
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until m holds n pods, or fails after timeout.
func (o *observer) waitFor(ctx context.Context, m map[string]time.Time, n int, timeout time.Duration, what string) error {
	deadline := time.After(timeout)
	for {
		o.mu.Lock()
		got := len(m)
		o.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-o.changed:
		case <-deadline:
			return fmt.Errorf("only %d of %d pods %s in time", got, n, what)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// latencies returns, for each pod in asked, the time from asked to seen, and the
// span from the first ask to the last sighting.
func (o *observer) latencies(asked map[string]time.Time, seen map[string]time.Time) ([]time.Duration, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var first, last time.Time
	lat := make([]time.Duration, 0, len(asked))
	for name, t0 := range asked {
		t1 := seen[name]
		lat = append(lat, t1.Sub(t0))
		if first.IsZero() || t0.Before(first) {
			first = t0
		}
		if t1.After(last) {
			last = t1
		}
	}
	return lat, last.Sub(first)
}

// timed runs fn for every pod with the configured concurrency and rate, recording
// when each was asked for.
func timed(ctx context.Context, cfg Config, fn func(name string) error) (map[string]time.Time, error) {
	var mu sync.Mutex
	asked := make(map[string]time.Time, cfg.Pods)
	err := forEach(ctx, cfg, cfg.Pods, func(i int) error {
		name := "p-" + strconv.Itoa(i)
		mu.Lock()
		asked[name] = time.Now()
		mu.Unlock()
		return fn(name)
	})
	return asked, err
}

func podTimeout(n int) time.Duration { return time.Duration(n)*50*time.Millisecond + 2*time.Minute }

// startPods creates the pods and waits for each to be Running.
func startPods(ctx context.Context, c kubernetes.Interface, o *observer, cfg Config, ns, node string) ([]time.Duration, time.Duration, error) {
	asked, err := timed(ctx, cfg, func(name string) error {
		_, err := c.CoreV1().Pods(ns).Create(ctx, benchPod(name, node), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := o.waitFor(ctx, o.running, cfg.Pods, podTimeout(cfg.Pods), "Running"); err != nil {
		return nil, 0, err
	}
	lat, span := o.latencies(asked, o.running)
	return lat, span, nil
}

// deletePods deletes every pod (gracefully, as kubectl would) and waits until each
// is gone from the API.
func deletePods(ctx context.Context, c kubernetes.Interface, o *observer, cfg Config, ns string) ([]time.Duration, time.Duration, error) {
	cfg.Rate = 0
	asked, err := timed(ctx, cfg, func(name string) error {
		return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil {
		return nil, 0, err
	}
	if err := o.waitFor(ctx, o.gone, cfg.Pods, podTimeout(cfg.Pods), "removed"); err != nil {
		return nil, 0, err
	}
	lat, span := o.latencies(asked, o.gone)
	return lat, span, nil
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i]) / float64(time.Millisecond)
}

func waitNodeReady(ctx context.Context, c kubernetes.Interface, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
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

// agentProcess is the node agent under measurement.
type agentProcess struct {
	cmd         *exec.Cmd
	node        string
	metricsAddr string
	logPath     string
}

func startAgent(ctx context.Context, cfg Config) (*agentProcess, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "vkubelet-bench-")
	if err != nil {
		return nil, err
	}
	a := &agentProcess{node: "bench-node", metricsAddr: addr, logPath: filepath.Join(dir, "agent.log")}
	args := append([]string{"--nodename", a.node, "--kubeconfig", cfg.Kubeconfig, "--provider", "mock",
		"--metrics-addr", addr, "--kubelet-port", "0", "--self-signed-serving-cert", "--disable-taint",
		"--cert-dir", dir, "--log-level", "warn"}, cfg.AgentArgs...)
	logFile, err := os.Create(a.logPath)
	if err != nil {
		return nil, err
	}
	a.cmd = exec.CommandContext(ctx, cfg.Binary, args...)
	a.cmd.Env = append(os.Environ(), cfg.AgentEnv...)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the node agent: %w", err)
	}
	fmt.Fprintf(cfg.Log, "bench: node agent pid %d: %s %s\n", a.cmd.Process.Pid, cfg.Binary, strings.Join(args, " "))
	return a, nil
}

func (a *agentProcess) stop() {
	_ = a.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
	}
}

func (a *agentProcess) tail() string {
	b, _ := os.ReadFile(a.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

type usage struct {
	rssMiB, peakMiB, cpuSeconds float64
}

// usage reads the agent's resident memory (now and peak) and CPU time from /proc.
func (a *agentProcess) usage() (usage, error) {
	var u usage
	pid := a.cmd.Process.Pid
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			u.rssMiB = kb / 1024
		case "VmHWM:":
			u.peakMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the parenthesised command: utime and stime are the 12th and 13th.
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(rest[11], 64)
	stime, _ := strconv.ParseFloat(rest[12], 64)
	u.cpuSeconds = (utime + stime) / 100 // USER_HZ is 100 on Linux
	return u, nil
}

// liveHeapMiB has the agent collect garbage (its pprof heap endpoint does, with
// gc=1) and returns its heap then, from go_memstats_heap_alloc_bytes.
func (a *agentProcess) liveHeapMiB() (float64, error) {
	resp, err := http.Get("http://" + a.metricsAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, fmt.Errorf("forcing a GC in the agent: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var heap float64
	found := false
	err = a.scrape(func(line string) {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			if f, perr := strconv.ParseFloat(strings.TrimSpace(v), 64); perr == nil {
				heap, found = f, true
			}
		}
	})
	if err == nil && !found {
		err = fmt.Errorf("agent metrics have no go_memstats_heap_alloc_bytes")
	}
	return heap / (1 << 20), err
}

// scrape calls fn with every line of the agent's /metrics.
func (a *agentProcess) scrape(fn func(line string)) error {
	resp, err := http.Get("http://" + a.metricsAddr + "/metrics")
	if err != nil {
		return fmt.Errorf("reading agent metrics: %w", err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fn(s.Text())
	}
	return s.Err()
}

// requests reads vkubelet_api_requests_total from the agent, keyed "VERB resource".
func (a *agentProcess) requests() (map[string]float64, error) {
	out := map[string]float64{}
	err := a.scrape(func(line string) {
		if !strings.HasPrefix(line, "vkubelet_api_requests_total{") {
			return
		}
		labels := line[strings.IndexByte(line, '{')+1 : strings.LastIndexByte(line, '}')]
		var verb, resource string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "verb":
				verb = v
			case "resource":
				resource = v
			}
		}
		f := strings.Fields(line)
		val, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[verb+" "+resource] = val
	})
	return out, err
}

// Median returns the median of several runs' figures, field by field (the lower
// middle for an even count), with the runs themselves in Runs.
func Median(runs []*Result) *Result {
	if len(runs) == 1 {
		return runs[0]
	}
	out := *runs[0]
	med := func(get func(*Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		sort.Float64s(v)
		return v[(len(v)-1)/2]
	}
	out.CeilingPodsPerS = med(func(r *Result) float64 { return r.CeilingPodsPerS })
	out.CeilingBefore = med(func(r *Result) float64 { return r.CeilingBefore })
	out.CeilingAfter = med(func(r *Result) float64 { return r.CeilingAfter })
	out.PodsPerS = med(func(r *Result) float64 { return r.PodsPerS })
	out.RatioToCeiling = med(func(r *Result) float64 { return r.RatioToCeiling })
	out.P50ms = med(func(r *Result) float64 { return r.P50ms })
	out.P90ms = med(func(r *Result) float64 { return r.P90ms })
	out.P99ms = med(func(r *Result) float64 { return r.P99ms })
	out.WritesPerPod = med(func(r *Result) float64 { return r.WritesPerPod })
	out.WritesByKind = map[string]float64{}
	for _, r := range runs {
		for k := range r.WritesByKind {
			out.WritesByKind[k] = med(func(r *Result) float64 { return r.WritesByKind[k] })
		}
	}
	out.IdleRSSMiB = med(func(r *Result) float64 { return r.IdleRSSMiB })
	out.PeakRSSMiB = med(func(r *Result) float64 { return r.PeakRSSMiB })
	out.RSSGrowthMiB = med(func(r *Result) float64 { return r.RSSGrowthMiB })
	out.HeapGrowthMiB = med(func(r *Result) float64 { return r.HeapGrowthMiB })
	out.CPUSeconds = med(func(r *Result) float64 { return r.CPUSeconds })
	out.DeletePodsPerS = med(func(r *Result) float64 { return r.DeletePodsPerS })
	out.DeleteP99ms = med(func(r *Result) float64 { return r.DeleteP99ms })
	out.DurationSeconds = med(func(r *Result) float64 { return r.DurationSeconds })
	out.CeilingSeconds = med(func(r *Result) float64 { return r.CeilingSeconds })
	out.CreateSeconds = med(func(r *Result) float64 { return r.CreateSeconds })
	out.DeleteSeconds = med(func(r *Result) float64 { return r.DeleteSeconds })
	out.Runs = runs
	return &out
}
