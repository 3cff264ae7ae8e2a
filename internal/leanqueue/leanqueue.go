// Package leanqueue is a work queue with client-go's semantics (an item is
// queued once however often it is added, and an item added while it is being
// handled is queued again when it is done) that gives back the memory a burst
// made it grow to once it is empty.
//
// client-go's queue keeps its items in two sets and a slice, which Go never
// shrinks: a node's three pod queues keep the room of the deepest burst they
// saw for the node's life. A process with a thousand virtual nodes and ten pods
// on each kept about 140 bytes a pod that way, more than the pod's controller
// state. This queue drops a set or the slice that grew past a few items when
// it empties, and makes a new one on the next add.
//
// It reports no metrics: queuetimer builds it for the queues client-go would
// build without (no name), whose nodes count their queues themselves.
package leanqueue

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// keptRoom is how many items a set or the slice may have held and still be
// kept when the queue empties: the small ones every add and done would
// otherwise make again.
const keptRoom = 8

// Queue is a work queue of strings. The zero Queue is not usable: use New.
type Queue struct {
	mu   sync.Mutex
	cond sync.Cond
	// items are the queued items in order, from head on.
	items []string
	head  int
	// itemsPeak, dirtyPeak and processingPeak are the most each held since it
	// was last made.
	itemsPeak, dirtyPeak, processingPeak int
	// dirty are the items queued or added again while being handled;
	// processing those handed out by Get and not yet Done.
	dirty, processing   map[string]struct{}
	shuttingDown, drain bool
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
	q.dirty = insert(q.dirty, item, &q.dirtyPeak)
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
	q.processing = insert(q.processing, item, &q.processingPeak)
	q.dirty = remove(q.dirty, item, &q.dirtyPeak)
	return item, false
}

// Done marks item handled; if it was added meanwhile, it is queued again.
func (q *Queue) Done(item string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.processing = remove(q.processing, item, &q.processingPeak)
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
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drain = false
	q.shuttingDown = true
	q.cond.Broadcast()
}

// ShutDownWithDrain is ShutDown, then waits until every item handed out is
// done, unless ShutDown is called meanwhile.
func (q *Queue) ShutDownWithDrain() {
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
	q.itemsPeak = max(q.itemsPeak, len(q.items)-q.head)
}

func (q *Queue) pop() string {
	item := q.items[q.head]
	q.items[q.head] = ""
	q.head++
	switch {
	case q.head == len(q.items) && q.itemsPeak > keptRoom:
		q.items, q.head, q.itemsPeak = nil, 0, 0
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= keptRoom && 2*q.head >= len(q.items):
		// Items keep coming before the queue empties: move them to the front,
		// so that the slice does not grow by the items taken.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return item
}

// insert adds item to set, made if nil, and notes its size in peak.
func insert(set map[string]struct{}, item string, peak *int) map[string]struct{} {
	if set == nil {
		set = make(map[string]struct{})
	}
	set[item] = struct{}{}
	*peak = max(*peak, len(set))
	return set
}

// remove deletes item from set, and returns nil for the set if it is empty
// and grew past keptRoom.
func remove(set map[string]struct{}, item string, peak *int) map[string]struct{} {
	delete(set, item)
	if len(set) == 0 && *peak > keptRoom {
		*peak = 0
		return nil
	}
	return set
}
