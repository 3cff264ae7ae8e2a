package fault_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// nodeReady is the node's Ready condition as the cluster sees it.
func nodeReady(c kubernetes.Interface, name string) corev1.ConditionStatus {
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestANodeCutOffFromTheAPIServerFor60sComesBackWithNothingLost cuts the network
// path between a node and the API server for a minute, silently (connections
// hang, as in a partition, rather than being refused). The cluster sees the node
// go NotReady (the controller-manager's node-lifecycle controller, grace 10 s);
// once the path is back the node is Ready again within its lease period, its pods
// run as before, each created once, and their statuses — which the
// controller-manager marked not Ready while the node was away — are the node's
// again.
func TestANodeCutOffFromTheAPIServerFor60sComesBackWithNothingLost(t *testing.T) {
	const (
		node      = "vk-partition"
		partition = 60 * time.Second
		lease     = 10 * time.Second
	)
	cp := testenv.ControlPlane(t)
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx := context.Background()

	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startPartitionProxy(t, u.Host)
	viaProxy := rest.CopyConfig(cp.RESTConfig)
	viaProxy.Host = "https://" + proxy.Addr()
	p, _ := startNode(t, node, func(cfg *agent.Config) { cfg.RESTConfig = viaProxy; cfg.LeaseDuration = lease })

	var names []string
	for i := range 5 {
		name := fmt.Sprintf("web-%d", i)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		waitRunning(t, c, ns, name, time.Now(), time.Minute)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		s := nodeReady(c, node)
		return s == corev1.ConditionTrue, fmt.Sprintf("node Ready=%q before the cut", s)
	})

	proxy.Cut()
	cutAt := time.Now()
	testenv.Eventually(t, partition, func() (bool, string) {
		s := nodeReady(c, node)
		return s != corev1.ConditionTrue, fmt.Sprintf("node still Ready=%q %s into the cut", s, time.Since(cutAt).Round(time.Second))
	})
	t.Logf("the cluster saw the node not Ready %s after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	time.Sleep(partition - time.Since(cutAt)) // the rest of the fault
	proxy.Heal()
	healedAt := time.Now()
	testenv.Eventually(t, 2*lease, func() (bool, string) {
		s := nodeReady(c, node)
		return s == corev1.ConditionTrue, fmt.Sprintf("node Ready=%q %s after the path came back", s, time.Since(healedAt).Round(time.Second))
	})
	t.Logf("node Ready again %s after the path came back", time.Since(healedAt).Round(100*time.Millisecond))

	for _, name := range names {
		testenv.Eventually(t, 2*lease, func() (bool, string) {
			pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if pod.Status.Phase != corev1.PodRunning || !podReady(pod) {
				return false, fmt.Sprintf("pod %s: phase %s, conditions %+v", name, pod.Status.Phase, pod.Status.Conditions)
			}
			if n := p.CreateCount(pod.UID); n != 1 {
				return false, fmt.Sprintf("pod %s created %d times in the provider", name, n)
			}
			return true, ""
		})
	}
	t.Logf("every pod Running and Ready again %s after the path came back", time.Since(healedAt).Round(100*time.Millisecond))
	if got := len(p.Pods()); got != len(names) {
		t.Errorf("provider runs %d pods, want %d", got, len(names))
	}
}
