package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/clockwait"
)

// MembershipLeaseName is the name of the i-th membership Lease of the
// replicas of group (LeaderElection.Group).
func MembershipLeaseName(group string, i int) string { return fmt.Sprintf("%s-replica-%d", group, i) }

// membership keeps this replica a member while it runs: it holds one of the
// group's membership Leases, the first free one, renews it every retry
// period, and tells the spreader which replicas hold the others. The Leases
// have fixed names, as many as LeaderElection.Replicas, so that RBAC can name
// them (a Lease per replica named after the replica would need the right to
// list every Lease of the namespace and to write any). A replica finding none
// free runs no share: it stands by, and takes only nodes left free for a lease
// duration.
type membership struct {
	ls           *leases
	group        string
	spread       *spreader
	clock        clock.Clock
	retry, renew time.Duration
	log          *slog.Logger
	cur          []*coordinationv1.Lease // as last read or written, nil: none
	seen         []lease
	mine         int // the slot held, -1 if none
	renewed      time.Time
}

func newMembership(ls *leases, group string, slots int, s *spreader, clk clock.Clock, retry, renew time.Duration, log *slog.Logger) *membership {
	return &membership{ls: ls, group: group, spread: s, clock: clk, retry: retry, renew: renew, log: log,
		cur: make([]*coordinationv1.Lease, slots), seen: make([]lease, slots), mine: -1}
}

// run keeps the membership until ctx ends, then gives the Lease up at once,
// so that the others count one replica less at their next read. It ticks at
// once, then every retry period, up to 20% longer at random, on m's clock.
func (m *membership) run(ctx context.Context) {
	defer m.leave()
	every := wait.Backoff{Duration: m.retry, Jitter: 0.2}
	wait.BackoffUntilWithContext(ctx, m.tick, clockwait.Backoff(m.clock, every.DelayFunc()), true)
}

// tick reads every membership Lease, renews or takes this replica's, and
// tells the spreader who the members are.
func (m *membership) tick(ctx context.Context) {
	now := m.clock.Now()
	read := make([]bool, len(m.seen))
	for i := range m.seen {
		cur, l, err := m.ls.get(ctx, MembershipLeaseName(m.group, i))
		if err != nil {
			m.log.Warn("reading a membership lease", "error", err)
			continue
		}
		m.cur[i], m.seen[i], read[i] = cur, l.since(m.seen[i], now), true
	}
	if i := m.mine; i >= 0 {
		switch {
		case read[i] && m.seen[i].holder != m.ls.me:
			m.log.Warn("lost the membership lease", "lease", MembershipLeaseName(m.group, i), "holder", m.seen[i].holder)
			m.mine = -1
		case read[i]:
			if l, err := m.ls.renew(ctx, m.cur[i]); err != nil {
				m.log.Warn("renewing the membership lease", "error", err)
			} else {
				m.keep(i, l, now)
			}
		}
		if m.mine >= 0 && now.Sub(m.renewed) > m.renew {
			m.log.Warn("membership lease not renewed in time; counting myself out", "lease", MembershipLeaseName(m.group, i))
			m.mine = -1
		}
	}
	for i := range m.seen {
		if m.mine >= 0 {
			break
		}
		if !read[i] || !m.seen[i].free(now) {
			continue
		}
		if l, err := m.ls.take(ctx, MembershipLeaseName(m.group, i), m.cur[i]); err == nil {
			m.log.Info("joined the replicas sharing the nodes", "lease", MembershipLeaseName(m.group, i))
			m.keep(i, l, now)
		}
	}
	var live []replica
	for i, l := range m.seen {
		if i == m.mine || (l.holder != m.ls.me && !l.free(now)) {
			live = append(live, replica{identity: l.holder, slot: i})
		}
	}
	m.spread.setMembers(live, now)
}

func (m *membership) keep(i int, l *coordinationv1.Lease, now time.Time) {
	m.mine, m.renewed, m.cur[i], m.seen[i] = i, now, l, read(l).since(m.seen[i], now)
}

func (m *membership) leave() {
	if m.mine < 0 {
		return
	}
	if err := m.ls.release(MembershipLeaseName(m.group, m.mine)); err != nil {
		m.log.Warn("giving the membership lease up", "error", err)
	}
	m.mine = -1
	m.spread.setMembers(nil, m.clock.Now())
}
