package informerutil

import (
	"context"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// unavailableBackoff paces the retries of a ListerWatcher made by
// RetryWhileUnavailable: short and capped (from 100ms, doubling, up to 1s), so
// that a node sees its pods again within about a second and a half of the API
// server's return; each wait is up to 50% longer at random, so that the informers
// of many nodes do not knock in step.
var unavailableBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second, Steps: math.MaxInt32}

// RetryWhileUnavailable wraps lw so that a list or watch the API server cannot take
// right now — refused or reset connection, the server restarting (503) or its
// watch cache still initializing (429) — is tried again inside the call, every
// second at most, until it succeeds or ctx ends. Any other error is returned at once.
//
// Why: client-go's reflector backs off on these errors exponentially up to a 30–60 s
// interval, and the back-off does not notice the API server coming back. After an
// outage of half a minute a node's pod informer went on waiting for up to a minute,
// so a pod bound to the node in that time did not start (found by a fault probe; see
// internal/lab/fault). Retrying within the call keeps the reflector's back-off at rest
// and costs one refused TCP connection a second while the server is away.
func RetryWhileUnavailable(lw cache.ListerWatcher) cache.ListerWatcher {
	return &retryingListWatch{inner: cache.ToListerWatcherWithContext(lw), plain: lw}
}

type retryingListWatch struct {
	inner cache.ListerWatcherWithContext
	// plain is what was wrapped, asked whether it supports watch-list semantics.
	plain cache.ListerWatcher
}

var _ cache.ListerWatcherWithContext = &retryingListWatch{}

func (r *retryingListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return retryUnavailable(ctx, func() (runtime.Object, error) { return r.inner.ListWithContext(ctx, opts) })
}

func (r *retryingListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return retryUnavailable(ctx, func() (watch.Interface, error) { return r.inner.WatchWithContext(ctx, opts) })
}

// List and Watch serve callers without a context (the reflector uses the
// WithContext methods): one attempt, as nothing could stop a retry.
func (r *retryingListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return r.inner.ListWithContext(context.Background(), opts)
}

func (r *retryingListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return r.inner.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher says,
// so that the reflector streams its lists exactly when it would without the wrapper.
func (r *retryingListWatch) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(r.plain)
}

// retryUnavailable calls call until it succeeds, fails other than Unavailable, or
// ctx ends (then it returns the last failure), waiting unavailableBackoff's steps
// in between, or the Retry-After the server asked for if it is longer.
func retryUnavailable[T any](ctx context.Context, call func() (T, error)) (T, error) {
	var (
		out T
		err error
	)
	next := unavailableBackoff.DelayFunc()
	delay := func() time.Duration {
		d := next()
		// A server that says when to come back (Retry-After) is not asked sooner.
		if s, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(s)*time.Second > d {
			d = wait.Jitter(time.Duration(s)*time.Second, unavailableBackoff.Jitter)
		}
		return d
	}
	_ = wait.DelayFunc(delay).Until(ctx, true, true, func(context.Context) (bool, error) {
		out, err = call()
		return err == nil || !Unavailable(err), nil
	})
	return out, err
}

// Unavailable reports whether err says the API server cannot be reached or cannot
// serve the request yet, as opposed to refusing it: worth trying again shortly.
func Unavailable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err)
}

// Client is the part of a typed client-go client of one resource (for example
// CoreV1().ConfigMaps(namespace)) that a ListWatch needs.
type Client[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ListWatchOf lists and watches through c, a client of clientset, with tweak (if
// not nil) applied to the options of every request, and retries while the API
// server is unavailable (RetryWhileUnavailable).
func ListWatchOf[L runtime.Object](clientset any, c Client[L], tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&o)
			}
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if tweak != nil {
				tweak(&o)
			}
			return c.Watch(ctx, o)
		},
	}
	// The clientset says whether it supports streamed lists (client-go's fakes
	// do not); the reflector asks.
	return RetryWhileUnavailable(cache.ToListWatcherWithWatchListSemantics(lw, clientset))
}
