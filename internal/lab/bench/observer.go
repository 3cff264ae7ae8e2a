package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

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

// waitRunning waits until n pods have been seen Running, or fails after timeout.
// A pod removed before that fails it at once: something other than the benchmark
// deletes its pods.
func (o *observer) waitRunning(ctx context.Context, n int, timeout time.Duration) error {
	return o.waitFor(ctx, o.running, n, timeout, "Running", func() error {
		for name := range o.gone {
			return fmt.Errorf("pod %s was deleted before it was Running, not by the benchmark: does a controller-manager run in this cluster? Its ReplicaSet controller deletes the pods of the benchmark's ReplicaSet of 0 replicas (use --pod-shape=%s there)", name, ShapeMinimal)
		}
		return nil
	})
}

// waitGone waits until n pods have been seen removed, or fails after timeout.
func (o *observer) waitGone(ctx context.Context, n int, timeout time.Duration) error {
	return o.waitFor(ctx, o.gone, n, timeout, "removed", nil)
}

// waitFor waits until m holds n pods, or fails after timeout or when check,
// called with o.mu held, fails.
func (o *observer) waitFor(ctx context.Context, m map[string]time.Time, n int, timeout time.Duration, what string, check func() error) error {
	deadline := time.After(timeout)
	for {
		o.mu.Lock()
		got := len(m)
		var err error
		if check != nil {
			err = check()
		}
		o.mu.Unlock()
		if err != nil {
			return err
		}
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

// timed runs fn for every pod of tmpl with the configured concurrency and rate,
// recording when each was asked for.
func timed(ctx context.Context, cfg Config, tmpl *podTemplate, fn func(name string) error) (map[string]time.Time, error) {
	var mu sync.Mutex
	asked := make(map[string]time.Time, cfg.Pods)
	err := forEach(ctx, cfg, cfg.Pods, func(i int) error {
		name := tmpl.name(i)
		mu.Lock()
		asked[name] = time.Now()
		mu.Unlock()
		return fn(name)
	})
	return asked, err
}

func podTimeout(n int) time.Duration { return time.Duration(n)*50*time.Millisecond + 2*time.Minute }

// startPods creates the pods, bound to nodes in turn, and waits for each to be
// Running.
func startPods(ctx context.Context, c kubernetes.Interface, o *observer, cfg Config, tmpl *podTemplate, ns string, nodes []string) ([]time.Duration, time.Duration, error) {
	var next atomic.Int64
	asked, err := timed(ctx, cfg, tmpl, func(name string) error {
		node := nodes[int(next.Add(1)-1)%len(nodes)]
		p, err := c.CoreV1().Pods(ns).Create(ctx, tmpl.pod(name, node), metav1.CreateOptions{})
		if err == nil {
			err = tmpl.check(p)
		}
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := o.waitRunning(ctx, cfg.Pods, podTimeout(cfg.Pods)); err != nil {
		return nil, 0, err
	}
	lat, span := o.latencies(asked, o.running)
	return lat, span, nil
}

// deletePods deletes every pod (gracefully, as kubectl would) and waits until each
// is gone from the API.
func deletePods(ctx context.Context, c kubernetes.Interface, o *observer, cfg Config, tmpl *podTemplate, ns string) ([]time.Duration, time.Duration, error) {
	cfg.Rate = 0
	asked, err := timed(ctx, cfg, tmpl, func(name string) error {
		return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil {
		return nil, 0, err
	}
	if err := o.waitGone(ctx, cfg.Pods, podTimeout(cfg.Pods)); err != nil {
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
