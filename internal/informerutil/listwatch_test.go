package informerutil

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// flakyListWatch fails its first failures calls of each kind with err.
type flakyListWatch struct {
	err                  error
	failures             int
	listCalls, watchCall int
}

func (f *flakyListWatch) List(metav1.ListOptions) (runtime.Object, error) {
	f.listCalls++
	if f.listCalls <= f.failures {
		return nil, f.err
	}
	return &corev1.PodList{}, nil
}

func (f *flakyListWatch) Watch(metav1.ListOptions) (watch.Interface, error) {
	f.watchCall++
	if f.watchCall <= f.failures {
		return nil, f.err
	}
	return watch.NewFake(), nil
}

func TestRetryWhileUnavailableRetriesWithinTheCall(t *testing.T) {
	for name, err := range map[string]error{
		"connection refused":  errRefused,
		"service unavailable": apierrors.NewServiceUnavailable("starting"),
		"too many requests":   apierrors.NewTooManyRequests("storage is (re)initializing", 0),
	} {
		t.Run(name, func(t *testing.T) {
			f := &flakyListWatch{err: err, failures: 2}
			lw := cache.ToListerWatcherWithContext(RetryWhileUnavailable(f))
			if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
				t.Fatalf("List: %v", err)
			}
			w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
			w.Stop()
			if f.listCalls != 3 || f.watchCall != 3 {
				t.Errorf("calls: list %d, watch %d; want 3 each (two failures, then success)", f.listCalls, f.watchCall)
			}
		})
	}
}

func TestRetryWhileUnavailablePassesOtherErrorsAtOnce(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	f := &flakyListWatch{err: forbidden, failures: 5}
	lw := cache.ToListerWatcherWithContext(RetryWhileUnavailable(f))
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("List: %v, want the Forbidden error", err)
	}
	if f.listCalls != 1 {
		t.Errorf("list calls: %d, want 1", f.listCalls)
	}
}

func TestRetryWhileUnavailableStopsWithTheContext(t *testing.T) {
	f := &flakyListWatch{err: errRefused, failures: 1 << 30}
	lw := cache.ToListerWatcherWithContext(RetryWhileUnavailable(f))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Watch: %v, want the last connection error once the context ended", err)
	}
	if f.watchCall < 2 {
		t.Errorf("watch calls: %d, want a few retries before the context ended", f.watchCall)
	}
}

// The waits between retries grow from 100ms to 1s, each up to half as long again
// at random (synctest's clock measures them).
func TestRetryWhileUnavailableBacksOffWithJitterUpToASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []time.Time
		call := func() (int, error) {
			calls = append(calls, time.Now())
			if len(calls) <= 6 {
				return 0, errRefused
			}
			return 1, nil
		}
		if _, err := retryUnavailable(context.Background(), call); err != nil {
			t.Fatal(err)
		}
		base := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
		jittered := false
		for i, want := range base {
			got := calls[i+1].Sub(calls[i])
			if got < want || got > want*3/2 {
				t.Errorf("wait %d: %s, want %s to %s", i+1, got, want, want*3/2)
			}
			jittered = jittered || got != want
		}
		if !jittered {
			t.Error("every wait is exactly its base: no jitter")
		}
	})
}

// A server that says when to come back is not asked sooner.
func TestRetryWhileUnavailableWaitsAsLongAsTheServerSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []time.Time
		call := func() (int, error) {
			calls = append(calls, time.Now())
			if len(calls) == 1 {
				return 0, apierrors.NewTooManyRequests("storage is (re)initializing", 3)
			}
			return 1, nil
		}
		if _, err := retryUnavailable(context.Background(), call); err != nil {
			t.Fatal(err)
		}
		if got := calls[1].Sub(calls[0]); got < 3*time.Second || got > 3*time.Second*3/2 {
			t.Errorf("waited %s after Retry-After 3s, want 3s to 4.5s", got)
		}
	})
}
