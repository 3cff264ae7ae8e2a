package fleet

import (
	"cmp"
	"hash/fnv"
	"slices"
	"sync"
	"time"
)

// Spreading the nodes over replicas (LeaderElection.Replicas > 0).
//
// Each replica holds one of Replicas membership Leases (<Group>-replica-<i>,
// membership.go) while it runs; the replicas holding one are the members, and
// every replica reads them all, so each knows how many there are. A node still
// runs in the one replica holding its Lease vkubelet-<node>, but a replica
// takes a free node only while it holds fewer than its share, and gives a node
// up (the node stopped first, its Lease emptied after) only while it holds more
// than its share and another member holds fewer than its own. The shares are a
// pure function of what every replica sees alike — the number of nodes, the
// members and how many nodes each holds — so replicas agree on them without
// talking to each other:
//
//   - N nodes over R members: each gets N/R, and the N%R members holding the
//     most nodes (ties broken by slot) get one more. A replica holding a
//     larger share keeps it, so a rounding never moves a node back and forth.
//   - A replica over its share gives up the nodes that rank lowest for it
//     (rendezvous hashing of node and replica), always the same ones, so its
//     goroutines agree which nodes go without coordinating beyond this type.
//
// Why counts and not an assignment of each node to a replica (rendezvous or
// consistent hashing): hashing alone spreads 6 nodes over 2 replicas as 4/2 or
// 5/1, not 3/3, and bounded-load hashing makes every node's owner depend on
// every other node's, so one node more in one replica's file (a rolling change
// of the NodeSet) could leave a node nobody's. Counts only move the surplus: a
// joining replica takes N/R nodes, whichever the others give up, and nothing
// else moves.
//
// Stability: a replica that joins takes nothing, and is given nothing, until
// it has been a member for settle (two retry periods) as of a read of the
// membership Leases, so that replicas starting together see each other before
// any takes the lot, however slow the reads. A node is given up only to a
// settled member under its share, and taken only while under one's own share,
// so a node is never given up when nobody would take it.
// When replicas see things differently (one reads the file before another, or
// sees a member expire a retry period earlier), a node may stay free: any
// replica takes a node that has stayed free for a lease duration, whatever its
// share.
//
// spreader holds what this replica knows and decides; the Leases are read and
// written by the callers (membership.go, spreadnode.go), which pass the time,
// so every decision is tested with made-up times (spread_test.go).
type spreader struct {
	me string
	// settle: how long a member waits after joining before it takes a node,
	// and how long others wait before giving it one. grace: how long a node
	// stays free before any replica takes it, share or not.
	settle, grace time.Duration

	mu sync.Mutex
	// members are the live members, by slot, as read at viewAt (when the
	// membership's last read began); memberSince says since when this replica
	// has seen each (its own join time for itself).
	members     []replica
	memberSince map[string]time.Time
	viewAt      time.Time
	// nodes holds, for every node of the configuration, what was last seen of
	// its Lease and whether this replica holds it.
	nodes map[string]*nodeLease
}

// replica is a member: a replica holding a membership Lease.
type replica struct {
	identity string
	slot     int
}

// nodeLease is what this replica knows of one node's Lease.
type nodeLease struct {
	seen lease
	// held: this replica runs the node; taking: it is trying to take the
	// Lease (counted as held, so that two goroutines do not overshoot the
	// share together).
	held, taking bool
	// freeSince is when this replica first saw the Lease free, zero while it
	// is held.
	freeSince time.Time
}

func newSpreader(me string, settle, grace time.Duration) *spreader {
	return &spreader{me: me, settle: settle, grace: grace,
		memberSince: map[string]time.Time{}, nodes: map[string]*nodeLease{}}
}

// add and remove follow the configuration's nodes (Fleet.Apply).
func (s *spreader) add(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes[node] == nil {
		s.nodes[node] = &nodeLease{}
	}
}

func (s *spreader) remove(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// setMembers records the live members read from the membership Leases at now.
func (s *spreader) setMembers(members []replica, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = slices.SortedFunc(slices.Values(members), func(a, b replica) int { return cmp.Compare(a.slot, b.slot) })
	since := make(map[string]time.Time, len(members))
	for _, m := range members {
		t, ok := s.memberSince[m.identity]
		if !ok {
			t = now
		}
		since[m.identity] = t
	}
	s.memberSince, s.viewAt = since, now
}

// settled says whether member m has been one long enough to take and be given
// nodes: for settle, as of a read of the members that began settle after m
// joined or later. A read that began before then may have missed replicas
// that joined at the same time; one slowed down by a busy API server delays
// the settling, rather than leaving the member with a stale count.
func (s *spreader) settled(m string) bool {
	since, ok := s.memberSince[m]
	return ok && s.viewAt.Sub(since) >= s.settle
}

// observe records what was read of node's Lease at now.
func (s *spreader) observe(node string, l lease, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil {
		return
	}
	n.seen = l.since(n.seen, now)
	if n.seen.free(now) {
		if n.freeSince.IsZero() {
			n.freeSince = now
		}
	} else {
		n.freeSince = time.Time{}
	}
}

// holdings counts the nodes each replica holds, as this replica sees them. A
// node whose Lease it last read held by itself, and which it no longer holds
// (given up or lost since), counts for nobody: counted as its own, it would
// make this replica give up one node more than its surplus.
func (s *spreader) holdings(now time.Time) map[string]int {
	h := map[string]int{}
	for _, n := range s.nodes {
		switch {
		case n.held || n.taking:
			h[s.me]++
		case n.seen.holder != s.me && !n.seen.free(now):
			h[n.seen.holder]++
		}
	}
	return h
}

// shares gives each of members its share of n nodes: n/len(members), one more
// for the n%len(members) members holding the most (ties by slot).
func shares(n int, members []replica, holds map[string]int) map[string]int {
	out := make(map[string]int, len(members))
	if len(members) == 0 {
		return out
	}
	order := slices.Clone(members)
	slices.SortStableFunc(order, func(a, b replica) int {
		if c := cmp.Compare(holds[b.identity], holds[a.identity]); c != 0 {
			return c
		}
		return cmp.Compare(a.slot, b.slot)
	})
	for i, m := range order {
		out[m.identity] = n / len(members)
		if i < n%len(members) {
			out[m.identity]++
		}
	}
	return out
}

// mayTake says whether this replica may try to take node's Lease now, and if
// so counts it as held until taken reports the outcome.
func (s *spreader) mayTake(node string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil || n.held || n.taking || !n.seen.free(now) {
		return false
	}
	ok := !n.freeSince.IsZero() && now.Sub(n.freeSince) >= s.grace
	if s.settled(s.me) {
		h := s.holdings(now)
		ok = ok || h[s.me] < shares(len(s.nodes), s.members, h)[s.me]
	}
	n.taking = ok
	return ok
}

// taken reports the outcome of a take mayTake allowed.
func (s *spreader) taken(node string, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[node]; n != nil {
		n.taking, n.held = false, held
	}
}

// released says this replica no longer holds node.
func (s *spreader) released(node string) { s.taken(node, false) }

// shouldRelease says whether this replica should give node up now: it holds
// more than its share, a settled member holds fewer than its own, and node is
// among the surplus, the held nodes ranking lowest for this replica.
func (s *spreader) shouldRelease(node string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil || !n.held {
		return false
	}
	h := s.holdings(now)
	share := shares(len(s.nodes), s.members, h)
	surplus := h[s.me] - share[s.me]
	if surplus <= 0 {
		return false
	}
	wanting := false
	for _, m := range s.members {
		if m.identity != s.me && h[m.identity] < share[m.identity] && s.settled(m.identity) {
			wanting = true
		}
	}
	if !wanting {
		return false
	}
	var held []string
	for name, n := range s.nodes {
		if n.held {
			held = append(held, name)
		}
	}
	slices.SortFunc(held, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a, s.me), rank(b, s.me)), cmp.Compare(a, b))
	})
	return slices.Contains(held[:min(surplus, len(held))], node)
}

// rank is node's rendezvous score for replica: the nodes a replica gives up
// first are those it ranks lowest, the same ones every time.
func rank(node, replica string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(replica))
	return h.Sum64()
}

// memberCount is the number of live members this replica sees (tests).
func (s *spreader) memberCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members)
}
