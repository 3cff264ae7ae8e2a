package mock

import (
	"container/heap"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxBatch bounds the notifications prepared under the provider's lock at once, so
// that a burst of due events (10,000 pods created together) does not starve callers.
const maxBatch = 256

// clockSkew is how late the scheduler may set a timer: more than this between reading
// the clock and creating the timer, and it reads the clock again.
const clockSkew = time.Millisecond

// scheduler delivers the pod notifications. One goroutine pops due events from a
// heap and calls the callback, so the notifications of a pod arrive in order and the
// provider needs no goroutine or timer per pod. It runs only while events are
// pending: the first push starts it and it returns once the heap is empty (or the
// context of NotifyPods ends), so that an idle node of a NodeSet keeps no goroutine
// for its mock. An event only says "this pod may have changed at this time": the
// pod's status is computed when the event is delivered.
type scheduler struct {
	ctx    context.Context // NotifyPods': delivery stops when it ends
	notify func(*corev1.Pod)
	events eventHeap     // guarded by Provider.mu
	wake   chan struct{} // capacity 1: an event was pushed
	// running says the goroutine runs (guarded by Provider.mu); it is set
	// before the goroutine starts and cleared under the same lock hold in which
	// it saw no event left, once it has nothing more to do, so there is never a
	// second one.
	running bool
}

// live reports whether the scheduler still delivers: its NotifyPods context has
// not ended.
func (s *scheduler) live() bool { return s.ctx.Err() == nil }

type event struct {
	at  time.Time
	key string    // namespace/name
	uid types.UID // an event for an earlier pod of that name is dropped
}

// pushLocked schedules a notification of rec at the time at, starting the
// goroutine if it does not run. Provider.mu is held.
func (p *Provider) pushLocked(s *scheduler, at time.Time, rec *podRecord) {
	heap.Push(&s.events, event{at: at, key: rec.key, uid: rec.uid})
	if !s.running {
		if !s.live() {
			return
		}
		s.running = true
		go p.runScheduler(s)
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// NotifyPods starts delivering pod notifications to notify: when a pod is created
// (Pending, or Running with no StartDelay), when it starts running, when it is updated
// and when it stops (its last status, with terminated containers). notify receives a
// copy it may keep and is never called with the provider's lock held. Delivery stops
// when ctx ends; a later call replaces the callback.
func (p *Provider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	s := &scheduler{ctx: ctx, notify: notify, wake: make(chan struct{}, 1)}
	p.mu.Lock()
	now := p.clock.Now()
	if prev := p.sched; prev != nil {
		// The earlier goroutine sees it is replaced and returns.
		select {
		case prev.wake <- struct{}{}:
		default:
		}
	}
	p.sched = s
	// Pods loaded from the StateFile, or created before this call, still have their
	// transitions ahead of them.
	for _, rec := range p.pods {
		if rec.running.Time().After(now) {
			p.pushLocked(s, rec.running.Time(), rec)
		}
		if rec.deleting() {
			p.pushLocked(s, rec.stopped.Time(), rec)
		}
	}
	p.mu.Unlock()
}

// schedulerLocked returns the scheduler that delivers notifications, nil if
// there is none or its context has ended. Provider.mu is held.
func (p *Provider) schedulerLocked() *scheduler {
	if p.sched == nil || !p.sched.live() {
		return nil
	}
	return p.sched
}

// runScheduler delivers s's events as they fall due, and returns once none is
// left, s's context has ended or s was replaced.
func (p *Provider) runScheduler(s *scheduler) {
	for {
		p.mu.Lock()
		if p.sched != s || !s.live() || len(s.events) == 0 {
			s.running = false
			p.mu.Unlock()
			return
		}
		now := p.clock.Now()
		version := p.version
		var out []*corev1.Pod
		for len(s.events) > 0 && !s.events[0].at.After(now) && len(out) < maxBatch {
			ev := heap.Pop(&s.events).(event)
			if pod := p.deliverLocked(ev, now); pod != nil {
				out = append(out, pod)
			}
		}
		removed := p.version != version
		var next time.Time
		if len(s.events) > 0 {
			next = s.events[0].at
		}
		p.mu.Unlock()

		for _, pod := range out {
			s.notify(pod)
		}
		if removed {
			if err := p.save(); err != nil {
				p.log.Warn("saving state", "err", err)
			}
		}
		if !next.IsZero() && !next.After(now) {
			continue // more events were due than one batch holds
		}

		if next.IsZero() {
			continue // none left, unless pushed meanwhile: the top of the loop sees
		}
		p.wait(s, next, now)
	}
}

// wait blocks until next, a push or the end of s's context. It may return early;
// the caller then looks again.
func (p *Provider) wait(s *scheduler, next, now time.Time) {
	// A timer is set relative to the clock's time when it is created. If the clock
	// jumped since now was read (a fake clock stepped by a test, or the time
	// spent notifying), the timer would fire late: look again instead.
	t := p.clock.NewTimer(next.Sub(now))
	defer t.Stop()
	if p.clock.Since(now) > clockSkew {
		return
	}
	select {
	case <-s.ctx.Done():
	case <-s.wake:
	case <-t.C():
	}
}

// deliverLocked returns the pod an event announces, or nil if the event is stale. A
// pod that has stopped is dropped from memory and returned with its last status.
func (p *Provider) deliverLocked(ev event, now time.Time) *corev1.Pod {
	rec := p.pods[ev.key]
	if rec == nil || rec.uid != ev.uid {
		return nil
	}
	if rec.goneAt(now) {
		p.dropLocked(rec, now)
		p.log.Debug("pod stopped", "pod", ev.key, "uid", ev.uid)
		return rec.terminatedPod()
	}
	if ev.at.Equal(rec.running.Time()) {
		p.log.Debug("pod running", "pod", ev.key, "uid", ev.uid)
	}
	return rec.podAt(now)
}

// eventHeap orders events by time (container/heap).
type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	ev := old[len(old)-1]
	*h = old[:len(old)-1]
	return ev
}
