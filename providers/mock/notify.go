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

// scheduler delivers the pod notifications. One goroutine, started by NotifyPods and
// ended with its context, pops due events from a heap and calls the callback, so the
// notifications of a pod arrive in order and the provider needs no goroutine or timer
// per pod. An event only says "this pod may have changed at this time": the pod's
// status is computed when the event is delivered.
type scheduler struct {
	notify func(*corev1.Pod)
	events eventHeap     // guarded by Provider.mu
	wake   chan struct{} // capacity 1: an event was pushed
	done   chan struct{} // closed when the goroutine has returned (for tests)
}

type event struct {
	at  time.Time
	key string    // namespace/name
	uid types.UID // an event for an earlier pod of that name is dropped
}

// pushLocked schedules a notification of rec at the time at. Provider.mu is held.
func (s *scheduler) pushLocked(at time.Time, rec *podRecord) {
	heap.Push(&s.events, event{at: at, key: rec.key(), uid: rec.uid})
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
	s := &scheduler{notify: notify, wake: make(chan struct{}, 1), done: make(chan struct{})}
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
		if rec.running.After(now) {
			s.pushLocked(rec.running, rec)
		}
		if rec.deleting() {
			s.pushLocked(rec.stopped, rec)
		}
	}
	p.mu.Unlock()
	go p.runScheduler(ctx, s)
}

func (p *Provider) runScheduler(ctx context.Context, s *scheduler) {
	defer close(s.done)
	defer func() {
		p.mu.Lock()
		if p.sched == s {
			p.sched = nil
		}
		p.mu.Unlock()
	}()
	for {
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if p.sched != s {
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

		if !p.wait(ctx, s, next, now) {
			return
		}
	}
}

// wait blocks until next (never, if zero), a push or the end of ctx, and reports
// whether ctx is still alive. It may return early; the caller then looks again.
func (p *Provider) wait(ctx context.Context, s *scheduler, next, now time.Time) bool {
	var timerC <-chan time.Time
	if !next.IsZero() {
		// A timer is set relative to the clock's time when it is created. If the clock
		// jumped since now was read (a fake clock stepped by a test, or the time
		// spent notifying), the timer would fire late: look again instead.
		t := p.clock.NewTimer(next.Sub(now))
		defer t.Stop()
		if p.clock.Since(now) > clockSkew {
			return ctx.Err() == nil
		}
		timerC = t.C()
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-timerC:
	}
	return true
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
	if ev.at.Equal(rec.running) {
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
