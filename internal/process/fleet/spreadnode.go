package fleet

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// errHandedOver says the node was given up to a replica under its share.
var errHandedOver = errors.New("handed the node over")

// runSpread runs the node only while this replica holds its Lease, taking and
// giving the Lease up as the spreader says (spread.go). Every retry period it
// reads the Lease; holding it, it renews it, or gives it up (the node stopped
// first, the Lease emptied after); not holding it, it takes it when the Lease
// is free and the spreader allows. It returns when ctx ends (the node stopped,
// then the Lease given up), when the Lease is lost (not renewed within the
// renew deadline, or taken by another after it expired), when the node fails
// (the Lease given up), or with errHandedOver.
func (f *Fleet) runSpread(ctx context.Context, m *member, cfg agent.Config, ready func()) error {
	le, s, ls := f.cfg.LeaderElection, f.spread, f.leases
	node, name := cfg.NodeName, LeaseName(cfg.NodeName)
	log := f.log(node)
	var (
		cur      *coordinationv1.Lease
		holding  bool
		renewed  time.Time
		run      *running
		nodeDone <-chan struct{} // run.done while holding, else nil
	)
	// giveUp stops the node and, unless lost, empties its Lease: in this
	// order, so that no other replica starts the node while it runs here.
	giveUp := func(lost bool) {
		run.stop()
		<-run.done
		m.standby.Store(true)
		if !lost {
			if err := ls.release(name); err != nil {
				log.Warn("giving the node's lease up", "error", err)
			}
		}
		holding, nodeDone = false, nil
		s.released(node)
	}
	m.standby.Store(true)
	for first := true; ; first = false {
		if !first { // the first try is at once
			select {
			case <-ctx.Done():
				if holding {
					giveUp(false)
				}
				return nil
			case <-nodeDone:
				if holding {
					// The node ended by itself: give it up, so that another
					// replica may try while this one backs off.
					giveUp(false)
					return run.err
				}
			case <-f.cfg.Clock.After(wait.Jitter(le.RetryPeriod, 0.2)):
			}
		}
		now := f.cfg.Clock.Now()
		l, seen, err := ls.get(ctx, name)
		if err == nil {
			cur = l
			s.observe(node, seen, now)
		} else if ctx.Err() == nil {
			log.Warn("reading the node's lease", "error", err)
		}
		if holding {
			switch {
			case s.shouldRelease(node, now):
				log.Info("handing the node over to a replica under its share", "lease", le.Namespace+"/"+name)
				giveUp(false)
				return errHandedOver
			case err == nil && (cur == nil || seen.holder != ls.me):
				log.Error("the node's lease was taken by another replica; stopping the node", "holder", seen.holder)
				giveUp(true)
				return errLost
			case err == nil:
				if l, err := ls.renew(ctx, cur); err != nil {
					log.Warn("renewing the node's lease", "error", err)
				} else {
					cur, renewed = l, now
				}
			}
			if now.Sub(renewed) > le.RenewDeadline {
				log.Error("the node's lease was not renewed in time; stopping the node", "deadline", le.RenewDeadline)
				giveUp(true)
				return errLost
			}
			continue
		}
		if err != nil || !s.mayTake(node, now) {
			continue
		}
		l, err = ls.take(ctx, name, cur)
		s.taken(node, err == nil)
		if err != nil {
			continue // another replica was quicker, or the API server is away
		}
		cur, renewed, holding = l, now, true
		s.observe(node, read(l), now)
		m.standby.Store(false)
		log.Info("holding the node's lease: running it", "lease", le.Namespace+"/"+name)
		run = f.runNode(ctx, cfg, ready)
		nodeDone = run.done
	}
}

// running is a node run while this replica holds its Lease.
type running struct {
	stop context.CancelFunc
	done chan struct{}
	err  error // once done is closed
}

func (f *Fleet) runNode(ctx context.Context, cfg agent.Config, ready func()) *running {
	ctx, cancel := context.WithCancel(ctx)
	r := &running{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = f.cfg.Run(ctx, cfg, ready)
	}()
	return r
}
