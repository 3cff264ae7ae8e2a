package fault_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// TestRestartsOfTheAPIServerAndEtcdDuringABurst restarts the API server, then etcd,
// while 300 pods are being created for a node (the creators retry what fails
// while the control plane is away). After each restart the node is Ready again
// within one lease period; in the end every pod runs, none was created twice in
// the provider, and none was deleted.
func TestRestartsOfTheAPIServerAndEtcdDuringABurst(t *testing.T) {
	const (
		node  = "vk-burst"
		total = 300
		lease = 10 * time.Second
	)
	cp := testenv.ControlPlane(t)
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx := context.Background()
	p, _ := startNode(t, node)

	var made atomic.Int32
	var wg sync.WaitGroup
	work := make(chan int)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				pod := boundPod(ns, fmt.Sprintf("burst-%03d", i), node)
				for {
					_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						made.Add(1)
						time.Sleep(500 * time.Millisecond) // 20 pods a second in all: a burst that lasts
						break
					}
					time.Sleep(200 * time.Millisecond) // the control plane is away: try again
				}
			}
		}()
	}
	go func() {
		for i := range total {
			work <- i
		}
		close(work)
	}()

	// restart stops a component once `after` pods are created, and starts it again.
	restart := func(what string, after int32, stop func() error, start func(context.Context) error) {
		t.Helper()
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			return made.Load() >= after, fmt.Sprintf("%d pods created", made.Load())
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // the fault: away for five seconds
		if err := start(ctx); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		// The node-lifecycle controller may have seen the lease expire meanwhile;
		// the node renews it at its next interval.
		testenv.Eventually(t, lease, func() (bool, string) {
			s := nodeReady(c, node)
			return s == corev1.ConditionTrue, fmt.Sprintf("node Ready=%q %s after %s came back", s, time.Since(back).Round(time.Second), what)
		})
		t.Logf("%s restarted with %d of %d pods created; node Ready %s after it was back", what, made.Load(), total, time.Since(back).Round(100*time.Millisecond))
	}
	restart("kube-apiserver", total/3, cp.StopAPIServer, cp.StartAPIServer)
	restart("etcd", total*2/3, cp.StopEtcd, cp.StartEtcd)
	wg.Wait()

	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		run := 0
		for _, pod := range l.Items {
			if pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
				run++
			}
		}
		return len(l.Items) == total && run == total, fmt.Sprintf("%d pods, %d Running", len(l.Items), run)
	})
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range l.Items {
		if n := p.CreateCount(pod.UID); n != 1 {
			t.Errorf("pod %s created %d times in the provider, want 1", pod.Name, n)
		}
		if n := p.DeleteCalls(pod.UID); n != 0 {
			t.Errorf("pod %s: %d DeletePod calls, want none", pod.Name, n)
		}
	}
	if got := len(p.Pods()); got != total {
		t.Errorf("provider runs %d pods, want %d", got, total)
	}
}
