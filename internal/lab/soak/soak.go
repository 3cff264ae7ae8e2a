// Package soak runs a virtual node for a long time under the churn of its pods
// (deletes and their replacements, updates, exec sessions, followed logs) and
// samples what must not grow with it: the node process's live heap, RSS,
// goroutines, file descriptors and sockets, and the provider's records. It fits
// a line to each figure after a warm-up and says whether it is flat.
// `vkubeletctl soak` (`make soak`) runs it; docs/RELIABILITY.md records its
// figures. It is not a benchmark (internal/lab/bench): it asks whether a node
// lasts, not how fast it is.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/proc"
)

// Config says how long and how hard to soak the node.
type Config struct {
	// Pods is how many pods the node runs throughout: a Deployment's replicas.
	Pods int
	// Duration is how long the churn lasts; WarmUp is how much of its start
	// is left out of the fitted lines: the time the node's bounded caches take
	// to fill. client-go's event correlator, the kubelet's too, keeps three
	// LRU caches of 4,096 entries keyed by the pod an Event is about: they
	// fill once about 4,096 pods have had Events, 10 minutes into the default
	// churn (1,000 pods, then 5 new ones a second); the mock keeps the counts
	// of gone pods 10 minutes.
	Duration time.Duration
	WarmUp   time.Duration
	// SampleEvery is the time between samples.
	SampleEvery time.Duration
	// Per second: pods deleted (their ReplicaSet creates as many), pods whose
	// labels are changed, exec sessions, and log streams followed for
	// LogFollow each.
	DeletesPerS, UpdatesPerS, ExecsPerS, LogsPerS float64
	LogFollow                                     time.Duration
	// HeapProfiles, if set, is a directory where the node's heap profiles are
	// saved: warm.heap at the first sample after the warm-up, end.heap at the
	// last.
	HeapProfiles string
	// Binary is the vkubelet executable run as the node.
	Binary string
	// Kubeconfig and RESTConfig name the cluster, with an admin's credential;
	// it runs a scheduler and a controller-manager that signs kubelet-serving
	// certificates, as `vkubeletctl up`'s and any cluster's.
	Kubeconfig string
	RESTConfig *rest.Config
	Log        io.Writer
}

// Defaults of Config's zero fields: `make soak`'s run.
func (c *Config) defaults() {
	set := func(f *float64, v float64) {
		if *f == 0 {
			*f = v
		}
	}
	if c.Pods == 0 {
		c.Pods = 1000
	}
	if c.Duration == 0 {
		c.Duration = 40 * time.Minute
	}
	if c.WarmUp == 0 {
		c.WarmUp = 15 * time.Minute
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 30 * time.Second
	}
	set(&c.DeletesPerS, 5)
	set(&c.UpdatesPerS, 2)
	set(&c.ExecsPerS, 1)
	set(&c.LogsPerS, 1)
	if c.LogFollow == 0 {
		c.LogFollow = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Result is a soak's figures.
type Result struct {
	Pods            int     `json:"pods"`
	DurationSeconds float64 `json:"duration_s"`
	WarmUpSeconds   float64 `json:"warm_up_s"`
	// StartSeconds is how long the Deployment's pods took to be Running.
	StartSeconds float64 `json:"start_s"`
	// Ops counts each kind of operation: delete, update, exec, logs.
	Ops map[string]Ops `json:"ops"`
	// Created counts the pods bound to the node from the start of the churn
	// until every replica was Running again: the replacements.
	Created int `json:"created"`
	// Trends are the fitted lines by figure (heap_mib, rss_mib, goroutines,
	// fds, sockets, provider_pods); Flat is whether all are flat.
	Trends  map[string]Trend `json:"trends"`
	Flat    bool             `json:"flat"`
	Samples []Sample         `json:"samples"`
	// CPUPercent is the node's CPU over the churn, in % of one core.
	CPUPercent float64 `json:"cpu_percent"`
	// RecoveredSeconds is how long after the churn stopped every replica was
	// Running again and nothing was left Terminating.
	RecoveredSeconds float64 `json:"recovered_s"`
}

// Figures lists the figures of Trends in the order they are reported.
func Figures() []string {
	out := make([]string, len(figures))
	for i, f := range figures {
		out[i] = f.name
	}
	return out
}

const (
	nodeName  = "soak-node"
	namespace = "soak"
	app       = "soak"
)

// Run soaks a mock node, run as a child process, in the cluster of cfg.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	// The churn's own client must not be what paces it: client-go's default
	// of 5 requests a second held the first soaks to 2 deletes a second.
	cfg.RESTConfig = rest.CopyConfig(cfg.RESTConfig)
	cfg.RESTConfig.QPS, cfg.RESTConfig.Burst = 200, 400
	c, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	node, metricsURL, kubeletURL, err := startNode(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer node.Stop()
	failed := func(err error) error { return fmt.Errorf("%w; node log:\n%s", err, node.Tail()) }
	if err := waitNodeReady(ctx, c); err != nil {
		return nil, failed(err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	podInformer := factory.Core().V1().Pods().Informer()
	// created counts the pods bound to the node while churning is set.
	var created atomic.Int64
	var churning atomic.Bool
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		if churning.Load() {
			created.Add(1)
		}
	}}); err != nil {
		return nil, err
	}
	informerCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory.Start(informerCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return nil, ctx.Err()
	}
	pods := podInformer.GetStore()

	res := &Result{Pods: cfg.Pods, DurationSeconds: cfg.Duration.Seconds(), WarmUpSeconds: cfg.WarmUp.Seconds()}
	began := time.Now()
	if err := createDeployment(ctx, c, cfg.Pods); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "soak: waiting for %d pods to run\n", cfg.Pods)
	if err := waitSettled(ctx, pods, cfg.Pods, 15*time.Minute); err != nil {
		return nil, failed(err)
	}
	res.StartSeconds = time.Since(began).Seconds()
	fmt.Fprintf(cfg.Log, "soak: %d pods Running after %.0f s; churning for %s\n", cfg.Pods, res.StartSeconds, cfg.Duration)

	kubeletAPI, err := kubeletClient(cfg.RESTConfig, kubeletURL)
	if err != nil {
		return nil, err
	}
	s := &sampler{node: node, metricsURL: metricsURL, kubeletAPI: kubeletAPI, apiPods: func() int { return len(pods.ListKeys()) }}
	ch := &churn{client: c, rest: cfg.RESTConfig, pods: pods, logFollow: cfg.LogFollow, ops: map[string]*Ops{}}
	kinds := ch.kinds(cfg.DeletesPerS, cfg.UpdatesPerS, cfg.ExecsPerS, cfg.LogsPerS)
	for _, k := range kinds {
		ch.ops[k.name] = &Ops{}
	}
	churning.Store(true)
	churnCtx, stopChurn := context.WithTimeout(ctx, cfg.Duration)
	defer stopChurn()
	done := make(chan struct{})
	go func() { defer close(done); ch.run(churnCtx, kinds) }()
	start := time.Now()
	cpuBefore, err := node.Usage()
	if err != nil {
		return nil, err
	}
	warmProfile := false
	samplingErr := wait.PollUntilContextCancel(churnCtx, cfg.SampleEvery, true, func(ctx context.Context) (bool, error) {
		sm, err := s.sample(ctx, start)
		if err != nil {
			if churnCtx.Err() != nil {
				return true, nil // cut short by the end of the churn
			}
			stopChurn()
			return false, failed(fmt.Errorf("sampling the node at %.0f s: %w", time.Since(start).Seconds(), err))
		}
		res.Samples = append(res.Samples, sm)
		// The heap as of this sample's collection (proc.LiveHeapMiB), the
		// first after the warm-up and the last: `go tool pprof -base`
		// shows what grew between them.
		if cfg.HeapProfiles != "" && (sm.Seconds >= cfg.WarmUp.Seconds() && !warmProfile || time.Since(start)+cfg.SampleEvery > cfg.Duration) {
			name := "end.heap"
			if !warmProfile {
				name, warmProfile = "warm.heap", true
			}
			if err := proc.SaveHeapProfile(ctx, metricsURL, filepath.Join(cfg.HeapProfiles, name)); err != nil {
				stopChurn()
				return false, err
			}
		}
		fmt.Fprintf(cfg.Log, "soak: %4.0f s heap %.1f MiB, RSS %.1f MiB, %.0f goroutines, %.0f fds (%.0f sockets), provider %.0f pods, API %.0f pods, %.0f queued\n",
			sm.Seconds, sm.HeapMiB, sm.RSSMiB, sm.Goroutines, sm.FDs, sm.Sockets, sm.ProviderPods, sm.APIPods, sm.QueuedPods)
		return false, nil
	})
	<-done
	if samplingErr != nil && !errors.Is(samplingErr, context.DeadlineExceeded) && !errors.Is(samplingErr, context.Canceled) {
		return nil, samplingErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cpuAfter, err := node.Usage()
	if err != nil {
		return nil, err
	}
	res.CPUPercent = 100 * (cpuAfter.CPUSeconds - cpuBefore.CPUSeconds) / time.Since(start).Seconds()
	res.Ops = ch.results()

	stopped := time.Now()
	if err := waitSettled(ctx, pods, cfg.Pods, 10*time.Minute); err != nil {
		return nil, failed(fmt.Errorf("after the churn: %w", err))
	}
	res.RecoveredSeconds = time.Since(stopped).Seconds()
	// Replacements of the last pods deleted come after the churn.
	churning.Store(false)
	res.Created = int(created.Load())
	if err := res.fit(); err != nil {
		return nil, err
	}
	if err := clean(ctx, c, pods); err != nil {
		return nil, failed(err)
	}
	node.Stop()
	// Stopped, the node no longer registers its Node again.
	if err := c.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("deleting node %s: %w", nodeName, err)
	}
	return res, nil
}

// clean deletes the soak's pods through the node, which is still running to
// stop them in its provider, then their namespace: with the Node, deleted
// once the node has stopped, a cluster given with --kubeconfig is left as it
// was.
func clean(ctx context.Context, c kubernetes.Interface, pods cache.Store) error {
	if err := c.AppsV1().Deployments(namespace).Delete(ctx, app, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		return fmt.Errorf("deleting the soak's Deployment: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
		return len(pods.ListKeys()) == 0, nil
	}); err != nil {
		return fmt.Errorf("%d of the soak's pods left after deleting its Deployment: %w", len(pods.ListKeys()), err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting namespace %s: %w", namespace, err)
	}
	return nil
}

// fit fits the trends to the samples taken after the warm-up.
func (r *Result) fit() error {
	r.Trends = map[string]Trend{}
	r.Flat = true
	for _, f := range figures {
		var x, y []float64
		for _, s := range r.Samples {
			if s.Seconds >= r.WarmUpSeconds {
				x, y = append(x, s.Seconds), append(y, f.get(s))
			}
		}
		t, err := fit(x, y, f.limit)
		if err != nil {
			return fmt.Errorf("%s after the %.0f s warm-up: %w", f.name, r.WarmUpSeconds, err)
		}
		r.Trends[f.name] = t
		r.Flat = r.Flat && t.Flat
	}
	return nil
}

// startNode runs the node with the mock provider as a child process, its
// metrics and pprof on a loopback port of its own.
func startNode(ctx context.Context, cfg Config) (node *proc.Child, metricsURL, kubeletURL string, err error) {
	metricsAddr, err := proc.FreeAddr()
	if err != nil {
		return nil, "", "", err
	}
	kubeletAddr, err := proc.FreeAddr()
	if err != nil {
		return nil, "", "", err
	}
	_, kubeletPort, _ := net.SplitHostPort(kubeletAddr)
	dir, err := os.MkdirTemp("", "vkubelet-soak-")
	if err != nil {
		return nil, "", "", err
	}
	// Room for the replacements scheduled while the pods they replace are
	// still Terminating.
	providerConfig, err := json.Marshal(map[string]string{"pods": fmt.Sprint(cfg.Pods + cfg.Pods/5 + 50), "cpu": "1000"})
	if err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "mock.json"), providerConfig, 0o644); err != nil {
		return nil, "", "", err
	}
	// The node asks the cluster for its serving certificate, as a kubelet
	// does, so that the API server can verify it for exec and logs, and
	// approves the request with its credential (an admin's here).
	args := []string{"--kubeconfig", cfg.Kubeconfig, "--nodename", nodeName,
		"--provider", "mock", "--provider-config", filepath.Join(dir, "mock.json"),
		"--address", "127.0.0.1", "--kubelet-port", kubeletPort, "--metrics-addr", metricsAddr,
		"--cert-dir", dir, "--approve-serving-csr", "--log-level", "warn"}
	node, err = proc.Start(ctx, cfg.Binary, args, nil, dir)
	if err != nil {
		return nil, "", "", fmt.Errorf("starting the node: %w", err)
	}
	fmt.Fprintf(cfg.Log, "soak: node pid %d: %s %v\n", node.Cmd.Process.Pid, cfg.Binary, args)
	return node, "http://" + metricsAddr, "https://" + kubeletAddr, nil
}

// kubeletClient is a client of the node's kubelet API with the soak's admin
// credential, which the node authenticates (the cluster CA signed it)
// and authorizes (SubjectAccessReview) as the kubelet does. The samples read
// the provider's pods there, not through the API server's node proxy, which
// refuses a node whose address is the loopback.
func kubeletClient(admin *rest.Config, url string) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Host = url
	cfg.APIPath = "/"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rest.UnversionedRESTClientFor(cfg)
}

func waitNodeReady(ctx context.Context, c kubernetes.Interface) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s", cond.Status)
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w", nodeName, last, err)
	}
	return nil
}

// createDeployment creates the soak's namespace and a Deployment of n pods on
// the node: the pods people run (the default ServiceAccount's token, an owner).
func createDeployment(ctx context.Context, c kubernetes.Interface, n int) error {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The ServiceAccount admission plugin refuses pods until the
	// controller-manager made the namespace's default ServiceAccount.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("no default ServiceAccount in %s: %w", namespace, err)
	}
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: nodeName},
					Tolerations:  []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						// The mock's log of the container is its args.
						Args: []string{"soak", "log"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
					}},
				},
			},
		},
	}
	_, err := c.AppsV1().Deployments(namespace).Create(ctx, d, metav1.CreateOptions{})
	return err
}

// waitSettled waits until n pods are Running and none other is bound to the
// node (nothing Terminating, nothing Pending).
func waitSettled(ctx context.Context, pods cache.Store, n int, timeout time.Duration) error {
	var running, other int
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		running, other = 0, 0
		for _, o := range pods.List() {
			p := o.(*corev1.Pod)
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			} else {
				other++
			}
		}
		return running == n && other == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d pods Running and %d others, want %d Running and no other: %w", running, other, n, err)
	}
	return nil
}
