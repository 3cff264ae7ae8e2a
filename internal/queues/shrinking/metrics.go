package shrinking

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// metrics are what client-go's queue of a name reports through a
// workqueue.MetricsProvider, counted at the same points of Add, Get and Done:
// the depth, the adds, each item's wait in the queue and its work, and, every
// updatePeriod until ShutDown, the seconds of work unfinished and of the
// longest running. client-go keeps the times of the items queued and handed
// out in two maps it never shrinks; these are dropped once empty, as the
// queue's sets are.
type metrics struct {
	clock                          clock.WithTicker
	depth                          workqueue.GaugeMetric
	adds                           workqueue.CounterMetric
	latency, workDuration          workqueue.HistogramMetric
	unfinishedWork, longestRunning workqueue.SettableGaugeMetric
	addTimes, processingStartTimes map[string]time.Time
	stop                           chan struct{}
	stopOnce                       sync.Once
	loop                           sync.WaitGroup
}

// updatePeriod is how often the unfinished work is measured: client-go's.
const updatePeriod = 500 * time.Millisecond

// NewWithMetrics returns an empty queue reporting to p under name what
// client-go's queue reports (workqueue.NewTypedWithConfig with that name and
// provider), with clk for its times; ShutDown stops its measuring.
func NewWithMetrics(name string, p workqueue.MetricsProvider, clk clock.WithTicker) *Queue {
	q := New()
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &metrics{clock: clk,
		depth: p.NewDepthMetric(name), adds: p.NewAddsMetric(name), latency: p.NewLatencyMetric(name),
		workDuration: p.NewWorkDurationMetric(name), unfinishedWork: p.NewUnfinishedWorkSecondsMetric(name),
		longestRunning: p.NewLongestRunningProcessorSecondsMetric(name), stop: make(chan struct{})}
	q.metrics = m
	m.loop.Go(func() {
		t := clk.NewTicker(updatePeriod)
		defer t.Stop()
		for {
			select {
			case <-t.C():
				q.mu.Lock()
				m.updateUnfinishedWork()
				q.mu.Unlock()
			case <-m.stop:
				return
			}
		}
	})
	return q
}

// The methods below are called with the queue's lock held; on a nil
// metrics they do nothing.

func (m *metrics) add(item string) {
	if m == nil {
		return
	}
	m.adds.Inc()
	m.depth.Inc()
	if _, ok := m.addTimes[item]; !ok {
		if m.addTimes == nil {
			m.addTimes = make(map[string]time.Time)
		}
		m.addTimes[item] = m.clock.Now()
	}
}

func (m *metrics) get(item string) {
	if m == nil {
		return
	}
	m.depth.Dec()
	if m.processingStartTimes == nil {
		m.processingStartTimes = make(map[string]time.Time)
	}
	m.processingStartTimes[item] = m.clock.Now()
	if start, ok := m.addTimes[item]; ok {
		m.latency.Observe(m.clock.Since(start).Seconds())
		delete(m.addTimes, item)
		if len(m.addTimes) == 0 {
			m.addTimes = nil
		}
	}
}

func (m *metrics) done(item string) {
	if m == nil {
		return
	}
	if start, ok := m.processingStartTimes[item]; ok {
		m.workDuration.Observe(m.clock.Since(start).Seconds())
		delete(m.processingStartTimes, item)
		if len(m.processingStartTimes) == 0 {
			m.processingStartTimes = nil
		}
	}
}

func (m *metrics) updateUnfinishedWork() {
	var total, oldest float64
	for _, start := range m.processingStartTimes {
		age := m.clock.Since(start).Seconds()
		total += age
		oldest = max(oldest, age)
	}
	m.unfinishedWork.Set(total)
	m.longestRunning.Set(oldest)
}

// shutDown stops the measuring and waits for it to end; it does not hold the
// queue's lock, which the measuring takes.
func (m *metrics) shutDown() {
	if m == nil {
		return
	}
	m.stopOnce.Do(func() { close(m.stop) })
	m.loop.Wait()
}
