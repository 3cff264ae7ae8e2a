package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/registry"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true})
}

// startNode runs a virtual node with the mock provider configured by mockCfg until
// the test ends, and returns it once it is ready.
func startNode(t *testing.T, name string, mockCfg mock.Config, tweak ...func(*agent.Config)) (*agent.Node, *mock.Provider) {
	t.Helper()
	cfg := nodetest.MockConfig(t, name, mockCfg)
	cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true // a CSR-issued certificate, as in a cluster
	for _, f := range tweak {
		f(&cfg)
	}
	n, _ := nodetest.Run(t, cfg)
	return n, n.Provider().(*mock.Provider)
}

func tolerateVirtualNode() []corev1.Toleration {
	return []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

func podsOn(ctx context.Context, c kubernetes.Interface, ns string) []corev1.Pod {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	return l.Items
}

func running(pods []corev1.Pod, node string) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// A provider is built with the node's own client, the one the node's
// controllers use, for a provider that reads the API (package upstream's
// listers).
func TestAProviderIsBuiltWithTheNodesClient(t *testing.T) {
	var got kubernetes.Interface
	providers := registry.Builtin()
	if err := providers.Add("reads-the-api", func(_ context.Context, cfg registry.InitConfig) (provider.PodLifecycleHandler, error) {
		got = cfg.Client
		return mock.New(mock.Config{}, cfg.NodeName)
	}); err != nil {
		t.Fatal(err)
	}
	n, _ := startNode(t, "vk-provider-client", mock.Config{}, func(cfg *agent.Config) {
		cfg.Provider, cfg.ProviderConfig, cfg.Providers = "reads-the-api", "", providers
	})
	if got == nil || got != n.Client() {
		t.Errorf("the provider was built with client %v, want the node's, %v", got, n.Client())
	}
}

// A node whose provider never answers Ping writes no lease and is never
// ready: past its startup timeout, Run stops with that error, and ready is
// never called.
func TestANodeNotReadyWithinItsStartupTimeoutStops(t *testing.T) {
	providers := registry.Builtin()
	if err := providers.Add("never-healthy", func(_ context.Context, cfg registry.InitConfig) (provider.PodLifecycleHandler, error) {
		p, err := mock.New(mock.Config{}, cfg.NodeName)
		if err == nil {
			p.SetPingError(errors.New("back end unreachable"))
		}
		return p, err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.MockConfig(t, "vk-startup-timeout", mock.Config{})
	cfg.Provider, cfg.ProviderConfig, cfg.Providers = "never-healthy", "", providers
	cfg.StartupTimeout = 3 * time.Second
	n, err := agent.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var readyCalls atomic.Int32
	err = n.Run(ctx, func() { readyCalls.Add(1) })
	if err == nil || !strings.Contains(err.Error(), "not ready within the startup timeout of 3s") {
		t.Errorf("Run returned %v, want the startup timeout's error", err)
	}
	if ctx.Err() != nil {
		t.Error("Run returned only when the test's own deadline passed")
	}
	if got := readyCalls.Load(); got != 0 {
		t.Errorf("ready called %d times for a node that was never ready", got)
	}
}

func TestDeploymentRunsOnVirtualNodeAndScalesToZero(t *testing.T) {
	const node = "vk-deploy"
	_, prov := startNode(t, node, mock.Config{})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](20),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:   []corev1.Container{{Name: "web", Image: "nginx"}},
					Tolerations:  tolerateVirtualNode(),
					NodeSelector: map[string]string{"kubernetes.io/hostname": node},
				},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var uids []types.UID
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		pods := podsOn(ctx, c, ns)
		uids = uids[:0]
		for _, p := range pods {
			uids = append(uids, p.UID)
		}
		return running(pods, node) == 20, fmt.Sprintf("%d of %d pods Running on %s", running(pods, node), len(pods), node)
	})
	for _, uid := range uids {
		if n := prov.CreateCount(uid); n != 1 {
			t.Errorf("pod %s created %d times in the provider", uid, n)
		}
	}

	// A patch, not a read-modify-write of the scale, which would race with the
	// deployment controller's own writes.
	if _, err := c.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		n := len(podsOn(ctx, c, ns))
		return n == 0, fmt.Sprintf("%d pods left in the API", n)
	})
	for _, uid := range uids {
		if prov.DeleteCalls(uid) == 0 {
			t.Errorf("DeletePod never called for pod %s", uid)
		}
	}
	if left := prov.Pods(); len(left) != 0 {
		t.Errorf("provider still runs %d pods", len(left))
	}
}

func TestGracefulDeletionWaitsForTheProvider(t *testing.T) {
	const node = "vk-grace"
	_, prov := startNode(t, node, mock.Config{StopDelay: mock.Duration{Duration: 3 * time.Second}})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-stop"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations:                   tolerateVirtualNode(),
		},
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return running(podsOn(ctx, c, ns), node) == 1, "pod not Running yet"
	})
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=slow-stop"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := c.CoreV1().Pods(ns).Delete(ctx, "slow-stop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var removed time.Duration
	timeout := time.After(30 * time.Second)
	for removed == 0 {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Deleted {
				removed = time.Since(start)
			}
		case <-timeout:
			t.Fatal("pod never removed from the API")
		}
	}
	t.Logf("pod removed %s after the delete request (provider stops in 3s, grace 5s)", removed.Round(time.Millisecond))
	if removed < 3*time.Second {
		t.Fatalf("pod removed after %s, before the provider confirmed it stopped (3s)", removed)
	}
	if prov.DeleteCalls(pod.UID) == 0 {
		t.Fatal("DeletePod was not called")
	}
}

func TestStatusWritesKeepOthersConditionsAndLabels(t *testing.T) {
	const node = "vk-status"
	startNode(t, node, mock.Config{StartDelay: mock.Duration{Duration: 3 * time.Second}})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const gate = "example.com/gate"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gated"},
		Spec: corev1.PodSpec{
			NodeName:       node,
			Containers:     []corev1.Container{{Name: "c", Image: "busybox"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait for our first status write (Pending, ContainerCreating), then write as
	// another client before the pod starts running.
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "gated", metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1, "no container status yet"
	})
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"Other"}]}}`, gate)
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "gated", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "gated", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"other":"kept"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		var err error
		p, err = c.CoreV1().Pods(ns).Get(ctx, "gated", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, "pod not Running"
	})
	var gateOK bool
	for _, cond := range p.Status.Conditions {
		if cond.Type == gate && cond.Status == corev1.ConditionTrue && cond.Reason == "Other" {
			gateOK = true
		}
	}
	if !gateOK || p.Labels["other"] != "kept" {
		t.Fatalf("another client's condition or label was lost: conditions %+v labels %v", p.Status.Conditions, p.Labels)
	}
}

// TestProviderFailuresConvergeAndAreEvents runs pods on a provider that fails 30%
// of its calls and answers every call 2 s late: every pod starts and is deleted,
// every failure is an Event, and the queues back off instead of spinning (the
// provider sees a few calls per pod, not hundreds).
func TestProviderFailuresConvergeAndAreEvents(t *testing.T) {
	const node = "vk-flaky"
	metricsAddr := freeAddr(t)
	startNode(t, node, mock.Config{FailureRate: 0.3, Seed: 7, Latency: mock.Duration{Duration: 2 * time.Second}},
		func(c *agent.Config) { c.MetricsAddr = metricsAddr })
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "flaky-" + strconv.Itoa(i)},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
					TerminationGracePeriodSeconds: ptr.To[int64](30)},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		r := running(podsOn(ctx, c, ns), node)
		return r == n, fmt.Sprintf("%d of %d pods Running", r, n)
	})
	testenv.DeleteAllPods(t, ns)
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		left := len(podsOn(ctx, c, ns))
		return left == 0, fmt.Sprintf("%d pods not yet removed", left)
	})

	// Every failed provider call is an Event (the recorder folds repeats into counts).
	failures := 0
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		failures = providerErrors(t, metricsAddr)
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=ProviderFailed"})
		if err != nil {
			return false, err.Error()
		}
		events := 0
		for _, e := range evs.Items {
			events += int(max(e.Count, 1))
		}
		return failures > 0 && events == failures, fmt.Sprintf("%d failed provider calls, %d ProviderFailed events", failures, events)
	})
	creates, deletes := providerCalls(t, metricsAddr, "CreatePod", ""), providerCalls(t, metricsAddr, "DeletePod", "")
	// With 30% failures a pod takes 1.4 calls on average; 3 per pod would mean
	// about one pod in a thousand needing six. A spinning queue makes hundreds.
	if creates > 3*n || deletes > 3*n {
		t.Errorf("%d CreatePod and %d DeletePod calls for %d pods: the queues do not back off", creates, deletes, n)
	}
	t.Logf("%d injected provider failures, each recorded as an Event; all %d pods converged with %d CreatePod and %d DeletePod calls (2 s each)",
		failures, n, creates, deletes)
}

// providerCalls is the agent's count of calls of one provider method with one
// result ("ok", "error"; "" for both).
func providerCalls(t *testing.T, addr, method, result string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "vkubelet_provider_calls_total{") || !strings.Contains(line, `"`+method+`"`) ||
			(result != "" && !strings.Contains(line, `result="`+result+`"`)) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		total += int(v)
	}
	return total
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// providerErrors reads vkubelet_provider_calls_total{result="error"} of the
// create/update/delete methods from the agent's metrics endpoint.
func providerErrors(t *testing.T, addr string) int {
	return providerCalls(t, addr, "CreatePod", "error") + providerCalls(t, addr, "UpdatePod", "error") + providerCalls(t, addr, "DeletePod", "error")
}
