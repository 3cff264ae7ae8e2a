package fault_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/leakcheck"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/mock"
)

func TestMain(m *testing.M) {
	// No scheduler: the tests bind their pods themselves, so that what they time is
	// the node's recovery, not the scheduler's. The controller-manager judges the
	// nodes' health, as in a cluster, with a short grace period.
	testenv.Main(m, controlplane.Config{ControllerManager: true, NodeMonitorGracePeriod: 10 * time.Second})
}

// startNode runs an in-process virtual node with the mock provider until stop is
// called or the test ends; tweak, if given, changes its configuration first. Once
// the node has stopped, the test fails if a goroutine or file descriptor of it is
// left (package leakcheck).
func startNode(t *testing.T, name string, tweak ...func(*agent.Config)) (p *mock.Provider, stop func()) {
	t.Helper()
	cfg := nodetest.MockConfig(t, name, mock.Config{})
	for _, f := range tweak {
		f(&cfg)
	}
	before := leakcheck.Take()
	// Cleanups run last first: this one after the node's stop, below.
	t.Cleanup(func() { before.Check(t, 15*time.Second) })
	n, stop := nodetest.Run(t, cfg)
	return n.Provider().(*mock.Provider), stop
}

// boundPod is a pod already bound to node, as the scheduler would leave it.
func boundPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello"}},
			}},
		},
	}
}

// waitRunning polls until the pod is Running in the API and returns the pod and
// how long after start that was.
func waitRunning(t *testing.T, c kubernetes.Interface, ns, name string, start time.Time, timeout time.Duration) (*corev1.Pod, time.Duration) {
	t.Helper()
	var last string
	for time.Since(start) < timeout {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case p.Status.Phase == corev1.PodRunning:
			return p, time.Since(start)
		default:
			last = fmt.Sprintf("phase %q", p.Status.Phase)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s not Running after %s: %s", ns, name, timeout, last)
	return nil, 0
}

// TestNewPodsStartPromptlyAfterAPIServerOutages stops the API server again and
// again under a node that runs pods, and times a pod created right after each
// return. The node's informers had been retrying all along: a pod must not wait
// for them to come out of a long back-off (before the fix, client-go's reflector
// back-off left pods unseen for up to a minute after the API server was back).
// Every pod runs in the provider exactly once.
func TestNewPodsStartPromptlyAfterAPIServerOutages(t *testing.T) {
	const (
		node    = "vk-outage"
		outages = 3
		// Long enough for client-go's reflector back-off to reach its 30 s cap
		// had nothing shortened it.
		outage = 20 * time.Second
		// What a pod may take after the API server is ready again: the node's
		// informers retry every second at most, and the API server's watch cache
		// may ask for a few more while it fills. Seen: 0.1–3.8 s with the fix;
		// 20 s and 68 s without (client-go's reflector back-off).
		prompt = 10 * time.Second
	)
	cp := testenv.ControlPlane(t)
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx := context.Background()
	p, _ := startNode(t, node)

	var names []string
	for i := range 5 {
		name := fmt.Sprintf("before-%d", i)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		waitRunning(t, c, ns, name, time.Now(), time.Minute)
	}

	for i := range outages {
		if err := cp.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outage) // the fault itself: the API server is away this long
		if err := cp.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("after-%d", i)
		start := time.Now()
		if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, took := waitRunning(t, c, ns, name, start, 3*time.Minute)
		t.Logf("outage %d (%s): a pod created once the API server was ready again was Running %s later",
			i+1, outage, took.Round(time.Millisecond))
		if took > prompt {
			t.Errorf("outage %d: new pod took %s to run after the API server returned, want at most %s", i+1, took, prompt)
		}
		names = append(names, name)
	}

	// Nothing lost, nothing duplicated.
	for _, name := range names {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s, want Running", name, pod.Status.Phase)
		}
		if n := p.CreateCount(pod.UID); n != 1 {
			t.Errorf("pod %s created %d times in the provider, want 1", name, n)
		}
		// However the informer came back (watch resumed, or a relist after the
		// API server's watch cache started afresh), unchanged pods are not handed
		// to the provider again.
		if n, v := p.UpdateCalls(pod.UID), p.VolumeUpdates(ns, name); n != 0 || v != 0 {
			t.Errorf("pod %s: %d UpdatePod and %d UpdatePodVolumes calls, want none", name, n, v)
		}
	}
	if got := len(p.Pods()); got != len(names) {
		t.Errorf("provider runs %d pods, want %d", got, len(names))
	}
}
