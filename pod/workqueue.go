package pod

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/client-go/util/workqueue"

	"github.com/vkubelet/vkubelet/internal/queues/sharedtimer"
)

// nodeQueue is one of a node's work queues (sync, status, delete) with its
// dispatcher. Both exist only when needed: the client-go queue is built on the
// first add, and the dispatcher goroutine runs while the queue has items and
// exits when it is empty. A process with a thousand idle nodes otherwise keeps
// three queues and three goroutines waiting in Get per node, about 5 KiB each
// node, for nodes that may never get a pod. Each node's queues and worker
// limits stay its own, so a node with a deep queue takes no worker from another.
type nodeQueue struct {
	name    string
	c       *Controller
	handler func(context.Context, string) error
	// slots holds a token per running worker, across dispatcher runs: a
	// dispatcher started while the last one's workers still run waits for them.
	// Made (for workers) by the first dispatcher, under mu: a node that never
	// gets a pod keeps none.
	slots   chan struct{}
	workers int

	mu sync.Mutex
	// q is nil until the first add.
	q workqueue.TypedRateLimitingInterface[string]
	// ctx is the handlers' context, nil until start: items wait until then.
	ctx context.Context
	// dispatching is set while a dispatcher goroutine runs.
	dispatching bool
	shutDown    bool

	// takeMu makes taking an item one step for every taker (the dispatcher and
	// the workers): an item one sees in the queue is the item it gets, so Get
	// never waits.
	takeMu sync.Mutex
}

func (c *Controller) newNodeQueue(name string, handler func(context.Context, string) error, workers int) *nodeQueue {
	return &nodeQueue{name: name, c: c, handler: handler, workers: workers}
}

// queue returns the client-go queue, built on first use; nil once shut down
// without ever having been used.
func (n *nodeQueue) queue() workqueue.TypedRateLimitingInterface[string] {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.q == nil && !n.shutDown {
		n.q = n.c.newQueue(n.name, n.kick)
	}
	return n.q
}

func (n *nodeQueue) Add(key string) {
	if q := n.queue(); q != nil {
		q.Add(key)
	}
}

func (n *nodeQueue) AddAfter(key string, d time.Duration) {
	if q := n.queue(); q != nil {
		q.AddAfter(key, d)
	}
}

// Len is the number of items waiting to be handled.
func (n *nodeQueue) Len() int {
	n.mu.Lock()
	q := n.q
	n.mu.Unlock()
	if q == nil {
		return 0
	}
	return q.Len()
}

// Get takes the next item, waiting for one; for tests that drive a controller
// that does not run.
func (n *nodeQueue) Get() (string, bool) {
	q := n.queue()
	if q == nil {
		return "", true // shut down before any use
	}
	return q.Get()
}

// Done marks key handled, for tests as Get.
func (n *nodeQueue) Done(key string) {
	if q := n.queue(); q != nil {
		q.Done(key)
	}
}

// ShutDown stops the queue: items added later are dropped and the dispatcher
// exits.
func (n *nodeQueue) ShutDown() {
	n.mu.Lock()
	n.shutDown = true
	q := n.q
	n.mu.Unlock()
	if q != nil {
		q.ShutDown()
	}
}

// start lets the queue's items be handled in ctx from now on.
func (n *nodeQueue) start(ctx context.Context) {
	n.mu.Lock()
	n.ctx = ctx
	n.mu.Unlock()
	n.kick()
}

// kick starts a dispatcher if the queue has items and none runs. It is called
// after every add, including delayed adds when their time comes, and after each
// item is done (an item added again while it was handled is queued at Done).
func (n *nodeQueue) kick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dispatching || n.ctx == nil || n.q == nil || n.q.Len() == 0 || n.q.ShuttingDown() {
		return
	}
	n.dispatching = true
	if n.slots == nil {
		n.slots = make(chan struct{}, n.workers)
	}
	go n.dispatch(n.ctx, n.q)
}

// more reports whether the dispatcher should take another item; when not, the
// dispatcher is marked gone under the same lock kick checks it with, so an item
// added after the check starts a new one.
func (n *nodeQueue) more(q workqueue.TypedRateLimitingInterface[string]) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if q.Len() == 0 || q.ShuttingDown() {
		n.dispatching = false
		return false
	}
	return true
}

// dispatch hands the queue's items to workers, at most len(slots) at a time,
// until the queue is empty. A worker is a goroutine that, done with its item,
// takes the next one while there is one, and ends when the queue is empty: a
// burst is worked through by goroutines whose stacks have grown to what the
// handlers need, rather than by a new goroutine per item growing its stack
// again (about 5 % of the node's CPU at 10,000 pod starts), and an idle node
// keeps none.
func (n *nodeQueue) dispatch(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) {
	for {
		n.slots <- struct{}{} // a free worker first: no item is held while waiting for one
		if !n.more(q) {
			<-n.slots
			return
		}
		key, ok := n.take(q)
		if !ok { // a worker took the last item: more now says so, or a new one came
			<-n.slots
			continue
		}
		go func() {
			defer n.kick()
			defer func() { <-n.slots }()
			for ok {
				n.c.process(ctx, q, n.handler, key)
				key, ok = n.take(q)
			}
		}()
	}
}

// take returns the queue's next item without waiting, or false if it has none.
func (n *nodeQueue) take(q workqueue.TypedRateLimitingInterface[string]) (string, bool) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	if q.Len() == 0 || q.ShuttingDown() { // as more: no item is handed out once shut down
		return "", false
	}
	key, shutdown := q.Get() // an item is queued: Get returns it at once
	return key, !shutdown
}

// newQueue builds a node's rate-limited queue: per-item exponential back-off from
// 200ms to 2 minutes for failing pods, and an overall bucket so a storm of
// failures cannot flood the provider. Its delayed adds are kept by the process's
// timer (the controller's own without one); added is called after each add.
func (c *Controller) newQueue(name string, added func()) workqueue.TypedRateLimitingInterface[string] {
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 2*time.Minute),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(200), 500)},
	)
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{
		Name:            name,
		MetricsProvider: c.metrics.queueMetrics(),
		Clock:           c.clock,
	}
	if c.metrics.nodes {
		cfg.Name = "" // without client-go's metrics: countedQueue counts it
	}
	cfg.DelayingQueue = c.timer.NotifyingQueue(workqueue.TypedQueueConfig[string]{
		Name: cfg.Name, MetricsProvider: cfg.MetricsProvider, Clock: c.clock}, added)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(limiter, cfg)
	if c.metrics.nodes {
		return c.metrics.countedQueueOf(name, q)
	}
	return q
}

// ownTimer gives a controller without the process's shared timer one of its
// own, run by Run.
func ownTimer(c *Controller) bool {
	if c.timer != nil {
		return false
	}
	c.timer = sharedtimer.New(c.clock)
	return true
}

// process runs handler on key, an item taken from q, and re-queues it with
// back-off if it fails.
func (c *Controller) process(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], handler func(context.Context, string) error, key string) {
	defer q.Done(key)
	start := c.clock.Now()
	err := handler(ctx, key)
	if o, ok := q.(workObserver); ok {
		o.observeWork(c.clock.Since(start))
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("sync failed; will retry", "pod", key, "error", err, "retries", q.NumRequeues(key))
		}
		q.AddRateLimited(key)
		return
	}
	q.Forget(key)
}
