// Package shrinking is a work queue with client-go's semantics (an item is
// queued once however often it is added, and an item added while it is being
// handled is queued again when it is done) that gives back the memory a burst
// made it grow to once it is empty.
//
// client-go's queue keeps its items in two sets and a slice, which Go never
// shrinks: a node's three pod queues keep the room of the deepest burst they
// saw for the node's life. A process with a thousand virtual nodes and ten pods
// on each kept about 140 bytes a pod that way, more than the pod's controller
// state. This queue drops a set or the slice when it empties, and makes a new
// one on the next add. Even the room for a few items, kept by each of a
// thousand nodes' queues, would be about 100 bytes a pod at ten pods a node;
// making it again costs a small allocation when an emptied queue gets an
// item, next to the kilobytes a pod's sync allocates.
//
// A queue of New reports no metrics (sharedtimer builds it for the queues
// client-go would build without, whose nodes count their queues themselves);
// one of NewWithMetrics reports client-go's, whose item times it also drops
// once the queue is empty.
package shrinking

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// Queue is a work queue of strings. The zero Queue is not usable: use New.
type Queue struct {
	mu   sync.Mutex
	cond sync.Cond
	// items are the queued items in order, from head on.
	items []string
	head  int
	// dirty are the items queued or added again while being handled;
	// processing those handed out by Get and not yet Done.
	dirty, processing   map[string]struct{}
	shuttingDown, drain bool
	// metrics is nil for a queue of New, which reports none.
	metrics *metrics
}

var _ workqueue.TypedInterface[string] = &Queue{}

// New returns an empty queue.
func New() *Queue {
	q := &Queue{}
	q.cond.L = &q.mu
	return q
}

// Add queues item, unless it is queued already; an item being handled is
// queued when it is done. Items added once the queue shuts down are dropped.
func (q *Queue) Add(item string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	if _, ok := q.dirty[item]; ok {
		return
	}
	q.metrics.add(item)
	q.dirty = insert(q.dirty, item)
	if _, ok := q.processing[item]; ok {
		return
	}
	q.push(item)
	q.cond.Signal()
}

// Len is the number of items queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}

// Get waits for an item and hands it out; shutdown is true when the queue has
// shut down and no item is left.
func (q *Queue) Get() (item string, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == q.head && !q.shuttingDown {
		q.cond.Wait()
	}
	if len(q.items) == q.head {
		return "", true
	}
	item = q.pop()
	q.metrics.get(item)
	q.processing = insert(q.processing, item)
	q.dirty = remove(q.dirty, item)
	return item, false
}

// Done marks item handled; if it was added meanwhile, it is queued again.
func (q *Queue) Done(item string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.metrics.done(item)
	q.processing = remove(q.processing, item)
	if _, ok := q.dirty[item]; ok {
		q.push(item)
		q.cond.Signal()
	} else if len(q.processing) == 0 {
		q.cond.Broadcast() // ShutDownWithDrain may wait for it
	}
}

// ShutDown makes the queue drop later adds, and Get return shutdown once the
// queued items are taken.
func (q *Queue) ShutDown() {
	q.metrics.shutDown()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drain = false
	q.shuttingDown = true
	q.cond.Broadcast()
}

// ShutDownWithDrain is ShutDown, then waits until every item handed out is
// done, unless ShutDown is called meanwhile.
func (q *Queue) ShutDownWithDrain() {
	q.metrics.shutDown()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drain = true
	q.shuttingDown = true
	q.cond.Broadcast()
	for len(q.processing) != 0 && q.drain {
		q.cond.Wait()
	}
}

// ShuttingDown reports whether ShutDown (or ShutDownWithDrain) was called.
func (q *Queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}

func (q *Queue) push(item string) {
	q.items = append(q.items, item)
}

func (q *Queue) pop() string {
	item := q.items[q.head]
	q.items[q.head] = ""
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = nil, 0
	case q.head >= minCompact && 2*q.head >= len(q.items):
		// Items keep coming before the queue empties: move them to the front,
		// so that the slice does not grow by the items taken.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return item
}

// minCompact is how many items must have been taken from the front of the
// slice before the rest is moved there.
const minCompact = 8

// insert adds item to set, made if nil.
func insert(set map[string]struct{}, item string) map[string]struct{} {
	if set == nil {
		set = make(map[string]struct{})
	}
	set[item] = struct{}{}
	return set
}

// remove deletes item from set, and returns nil for the set once it is
// empty: Go keeps a map's room after its items are deleted.
func remove(set map[string]struct{}, item string) map[string]struct{} {
	delete(set, item)
	if len(set) == 0 {
		return nil
	}
	return set
}
