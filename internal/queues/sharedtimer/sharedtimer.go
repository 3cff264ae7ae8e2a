// Package sharedtimer is the timer of a process's many nodes: it fires the
// delayed adds of many work queues, and the periodic ticks of many nodes' work
// (Every), from one goroutine and one heap. client-go's delaying queue gives
// every queue a goroutine and an 8 KiB channel of its own; a process with a
// thousand virtual nodes has three thousand pod queues, nearly all idle, and
// would keep 24 MiB and three thousand goroutines for retries and grace-period
// checks that rarely come. A Timer's queues are shrinking's (which give back a
// burst's room once empty, where client-go's keep it), with AddAfter kept by
// the Timer. A tick (a node's Lease renewal, its status refresh) is an entry of
// the heap, where a time.Ticker is a runtime timer and a channel per node.
package sharedtimer

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/queues/shrinking"
)

// Timer keeps the delayed items of its queues and adds each to its queue when
// its time comes, while Run runs.
type Timer struct {
	clock clock.WithTicker

	mu      sync.Mutex
	pending pendingHeap
	// wake is signalled (1 slot) when the earliest item changes.
	wake chan struct{}
}

// New returns a Timer on clk (nil: the real clock).
func New(clk clock.WithTicker) *Timer {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Timer{clock: clk, wake: make(chan struct{}, 1)}
}

// Queue returns a new delaying queue whose AddAfter the Timer keeps: a shrinking
// queue reporting to cfg's MetricsProvider what client-go's plain queue
// configured by cfg would, or none when cfg has no name (client-go reports none
// of it either). Without a MetricsProvider, client-go's queue reports to its
// global one, so it is client-go's queue. For a rate-limiting queue, pass it as
// TypedRateLimitingQueueConfig.DelayingQueue.
func (t *Timer) Queue(cfg workqueue.TypedQueueConfig[string]) workqueue.TypedDelayingInterface[string] {
	return t.NotifyingQueue(cfg, nil)
}

// NotifyingQueue is Queue, calling added (if not nil) after each item it takes,
// whether added at once or when its delay has passed: a consumer that runs only
// while its queue has items learns there is work without waiting in Get.
func (t *Timer) NotifyingQueue(cfg workqueue.TypedQueueConfig[string], added func()) workqueue.TypedDelayingInterface[string] {
	if cfg.Clock == nil {
		cfg.Clock = t.clock
	}
	var base workqueue.TypedInterface[string]
	switch {
	case cfg.Name == "":
		// client-go reports no metrics for it either.
		base = shrinking.New()
	case cfg.MetricsProvider != nil:
		base = shrinking.NewWithMetrics(cfg.Name, cfg.MetricsProvider, cfg.Clock)
	default:
		base = workqueue.NewTypedWithConfig(cfg)
	}
	return &queue{TypedInterface: base, timer: t, added: added}
}

// Every calls tick every period from now on, from Run's goroutine, until the
// returned Ticker is stopped. tick must not block: it tells its owner, which
// does the work elsewhere. As with a time.Ticker, ticks missed while Run was
// late (or a fake clock jumped) are not made up: the next one comes at the next
// multiple of period after the late one.
func (t *Timer) Every(period time.Duration, tick func()) *Ticker {
	if period <= 0 {
		panic("sharedtimer: Every needs a positive period")
	}
	k := &Ticker{timer: t}
	k.entry = pending{tick: tick, period: period, at: t.clock.Now().Add(period)}
	t.mu.Lock()
	defer t.mu.Unlock()
	heap.Push(&t.pending, &k.entry)
	if t.pending[0] == &k.entry {
		t.signal()
	}
	return k
}

// Ticker is a periodic entry of a Timer (Every).
type Ticker struct {
	timer *Timer
	entry pending
}

// Stop ends the ticks. A tick already being delivered may still arrive after
// Stop returns.
func (k *Ticker) Stop() {
	t := k.timer
	t.mu.Lock()
	defer t.mu.Unlock()
	if k.entry.index >= 0 {
		heap.Remove(&t.pending, k.entry.index)
		k.entry.index = -1
	}
}

// signal wakes Run, which waits for the wrong time when the earliest entry
// changed; called with t.mu held.
func (t *Timer) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run adds the items whose time has come to their queues, and calls the ticks
// that are due, until ctx ends.
func (t *Timer) Run(ctx context.Context) {
	for {
		due, next := t.takeDue()
		for _, p := range due {
			if p.tick != nil {
				p.tick()
			} else {
				p.q.Add(p.item)
			}
		}
		var (
			fire  <-chan time.Time
			timer clock.Timer
		)
		if !next.IsZero() {
			wait := next.Sub(t.clock.Now())
			if wait <= 0 {
				continue
			}
			timer = t.clock.NewTimer(wait)
			fire = timer.C()
			if !t.clock.Now().Before(next) {
				// The clock reached the entry while the timer was being
				// made (a fake clock stepped meanwhile): the timer, counting
				// from after the step, would fire a whole wait late.
				timer.Stop()
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-fire:
		case <-t.wake:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// takeDue removes the items whose time has come and returns them, and the
// ticks that are due, with the time of the next entry (zero: none pending).
func (t *Timer) takeDue() (due []*pending, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for len(t.pending) > 0 {
		p := t.pending[0]
		if p.at.After(now) {
			return due, p.at
		}
		if p.tick != nil {
			// The next multiple of the period after now, as a runtime
			// ticker's: missed ticks are not made up.
			p.at = p.at.Add(p.period * (1 + now.Sub(p.at)/p.period))
			heap.Fix(&t.pending, 0)
			due = append(due, p)
			continue
		}
		heap.Pop(&t.pending)
		delete(p.q.waiting, p.item)
		if len(p.q.waiting) == 0 {
			p.q.waiting = nil // as the shrinking queue's sets, not kept at a burst's size
		}
		due = append(due, p)
	}
	return due, time.Time{}
}

// queue is one work queue whose delayed adds its Timer keeps.
type queue struct {
	workqueue.TypedInterface[string]
	timer *Timer
	// waiting are the queue's items in the Timer's heap, guarded by timer.mu.
	waiting map[string]*pending
	// added, if not nil, is called after each Add.
	added func()
}

// Add adds item now and tells the queue's consumer.
func (q *queue) Add(item string) {
	q.TypedInterface.Add(item)
	if q.added != nil {
		q.added()
	}
}

// AddAfter adds item once d has passed. An item already waiting keeps the
// earlier of its two times, as with client-go's delaying queue.
func (q *queue) AddAfter(item string, d time.Duration) {
	if q.ShuttingDown() {
		return
	}
	if d <= 0 {
		q.Add(item)
		return
	}
	t := q.timer
	at := t.clock.Now().Add(d)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := q.waiting[item]; p != nil {
		if at.Before(p.at) {
			p.at = at
			heap.Fix(&t.pending, p.index)
		}
	} else {
		p = &pending{q: q, item: item, at: at}
		heap.Push(&t.pending, p)
		if q.waiting == nil {
			q.waiting = map[string]*pending{}
		}
		q.waiting[item] = p
	}
	if t.pending[0].q == q && t.pending[0].item == item {
		t.signal()
	}
}

// pending is an item waiting for its time, or a Ticker's next tick (tick set).
type pending struct {
	q    *queue
	item string
	// tick and period are a Ticker's: tick is called each period.
	tick   func()
	period time.Duration
	at     time.Time
	index  int // in the heap; -1 once a Ticker is stopped
}

// pendingHeap orders pending items by time, earliest first.
type pendingHeap []*pending

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h pendingHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *pendingHeap) Push(x any) {
	p := x.(*pending)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *pendingHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}
