package testenv

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Removal is what a test saw when a pod left the API: which pod, and what
// its check said at that moment (nil: all was well).
type Removal struct {
	UID types.UID
	Err error
}

// Removals are the pods of a namespace seen leaving the API, by name, each
// checked at that moment: for tests of "a pod leaves the API only once its
// provider stopped it", the check asks the provider.
type Removals struct {
	mu   sync.Mutex
	seen map[string]Removal
}

// WatchRemovals watches the pods of ns from now until the test ends and calls
// check with each pod the API server reports deleted, on the watch's
// goroutine, as it is reported.
func WatchRemovals(t testing.TB, c kubernetes.Interface, ns string, check func(*corev1.Pod) error) *Removals {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &Removals{seen: map[string]Removal{}}
	done := make(chan struct{})
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Deleted || !ok {
				continue
			}
			err := check(p)
			r.mu.Lock()
			r.seen[p.Name] = Removal{UID: p.UID, Err: err}
			r.mu.Unlock()
		}
	}()
	return r
}

// Seen returns the removals seen so far.
func (r *Removals) Seen() map[string]Removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.seen)
}

// Wait waits until n pods have been seen leaving the API.
func (r *Removals) Wait(t testing.TB, n int, timeout time.Duration) map[string]Removal {
	t.Helper()
	var seen map[string]Removal
	Eventually(t, timeout, func() (bool, string) {
		seen = r.Seen()
		return len(seen) >= n, fmt.Sprintf("%d pods seen leaving the API, want %d", len(seen), n)
	})
	return seen
}
