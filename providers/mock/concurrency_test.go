package mock

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

// TestConcurrentUse is a smoke test for -race: many goroutines create, read, update
// and delete pods while the clock moves, readers scrape stats, and notifications flow.
// At the end every pod was created once and announced stopped once.
func TestConcurrentUse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perWorker int
		stateFile bool
	}{
		{name: "in memory", perWorker: 100},
		{name: "with state file", perWorker: 10, stateFile: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const workers = 16
			cfg := Config{StartDelay: Duration{Duration: time.Second}, StopDelay: Duration{Duration: 2 * time.Second}}
			if tc.stateFile {
				cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
			}
			p, clk := newTestProvider(t, cfg)
			// The clock below runs hours ahead; the counts read at the end
			// must outlive their pods for as long.
			p.countsKept = math.MaxInt64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			var mu sync.Mutex
			stopped := map[types.UID]int{}
			notifyPods(t, p, func(pod *corev1.Pod) {
				if term := pod.Status.ContainerStatuses[0].State.Terminated; term != nil {
					mu.Lock()
					stopped[pod.UID]++
					mu.Unlock()
				}
			})

			var work, background sync.WaitGroup
			done := make(chan struct{})
			background.Go(func() { // the clock
				for {
					select {
					case <-done:
						return
					default:
						clk.Step(100 * time.Millisecond)
					}
				}
			})
			background.Go(func() { // scrapers
				for {
					select {
					case <-done:
						return
					default:
						p.GetStatsSummary(ctx)
						p.GetMetricsResource(ctx)
						p.GetPods(ctx)
					}
				}
			})
			shared := testPod("shared", "uid-shared")
			for w := range workers {
				work.Go(func() {
					// Every worker creates the shared pod: it must be created once.
					// Each call passes its own copy: a pod passed in is the
					// provider's from then on (provider contract).
					if err := p.CreatePod(ctx, shared.DeepCopy()); err != nil {
						t.Errorf("CreatePod shared: %v", err)
					}
					for i := range tc.perWorker {
						name := fmt.Sprintf("pod-%d-%d", w, i)
						pod := testPod(name, types.UID(name))
						if err := p.CreatePod(ctx, pod.DeepCopy()); err != nil {
							t.Errorf("CreatePod %s: %v", name, err)
							return
						}
						if _, err := p.GetPodStatus(ctx, "default", name); err != nil {
							t.Errorf("GetPodStatus %s: %v", name, err)
						}
						pod.Labels = map[string]string{"updated": "yes"}
						if err := p.UpdatePod(ctx, pod.DeepCopy()); err != nil {
							t.Errorf("UpdatePod %s: %v", name, err)
						}
						if err := p.DeletePod(ctx, pod.DeepCopy()); err != nil {
							t.Errorf("DeletePod %s: %v", name, err)
						}
					}
				})
			}
			work.Wait()
			if err := p.DeletePod(ctx, shared.DeepCopy()); err != nil {
				t.Errorf("DeletePod shared: %v", err)
			}
			close(done)
			background.Wait()
			clk.Step(time.Minute)

			if pods := p.Pods(); len(pods) != 0 {
				t.Errorf("%d pods left after they all stopped", len(pods))
			}
			if n := p.CreateCount("uid-shared"); n != 1 {
				t.Errorf("the shared pod was created %d times, want 1", n)
			}
			want := workers*tc.perWorker + 1
			eventually.TrueEvery(t, waitTimeout, time.Millisecond, func() (bool, string) {
				mu.Lock()
				n := len(stopped)
				mu.Unlock()
				return n == want, fmt.Sprintf("%d pods announced stopped, want %d", n, want)
			})
			mu.Lock()
			defer mu.Unlock()
			for uid, n := range stopped {
				if n != 1 || p.CreateCount(uid) != 1 {
					t.Errorf("pod %s: announced stopped %d times, created %d times; want 1 and 1", uid, n, p.CreateCount(uid))
				}
			}
		})
	}
}

// BenchmarkPodLifecycle measures a pod's round trip through the mock with the
// notifier running, as the 10,000-pod benchmark of the controllers drives it.
func BenchmarkPodLifecycle(b *testing.B) {
	p, err := New(Config{}, "node-1")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.NotifyPods(ctx, func(*corev1.Pod) {})
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		name := fmt.Sprintf("pod-%d", i)
		pods[i] = testPod(name, types.UID(name))
	}
	b.ResetTimer()
	for _, pod := range pods {
		if err := p.CreatePod(ctx, pod); err != nil {
			b.Fatal(err)
		}
		if _, err := p.GetPodStatus(ctx, pod.Namespace, pod.Name); err != nil {
			b.Fatal(err)
		}
	}
	for _, pod := range pods {
		if err := p.DeletePod(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
}
