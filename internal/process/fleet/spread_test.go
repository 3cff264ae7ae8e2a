package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSharesSplitTheNodesEvenlyAndLeaveTheLargerSharesWhereTheyAre(t *testing.T) {
	a, b, c := replica{"a", 0}, replica{"b", 1}, replica{"c", 2}
	for _, tc := range []struct {
		n       int
		members []replica
		holds   map[string]int
		want    map[string]int
	}{
		{6, []replica{a, b}, map[string]int{"a": 6}, map[string]int{"a": 3, "b": 3}},
		{7, []replica{a, b}, map[string]int{"a": 4, "b": 3}, map[string]int{"a": 4, "b": 3}},
		// b holds four: the larger share stays with it, nothing moves.
		{7, []replica{a, b}, map[string]int{"a": 3, "b": 4}, map[string]int{"a": 3, "b": 4}},
		// A tie goes to the lower slot, as every replica sees it.
		{7, []replica{b, a}, map[string]int{}, map[string]int{"a": 4, "b": 3}},
		{1000, []replica{a, b, c}, map[string]int{"c": 1000}, map[string]int{"a": 333, "b": 333, "c": 334}},
		{2, []replica{a, b, c}, map[string]int{}, map[string]int{"a": 1, "b": 1, "c": 0}},
		{5, nil, map[string]int{"a": 5}, map[string]int{}},
	} {
		if got := shares(tc.n, tc.members, tc.holds); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("shares(%d, %v, %v) = %v, want %v", tc.n, tc.members, tc.holds, got, tc.want)
		}
	}
}

// spreadOf returns a spreader for replica me over nodes n-0 … n-(count-1),
// every Lease seen free at t0.
func spreadOf(me string, count int) (*spreader, []string) {
	s := newSpreader(me, 2*time.Second, 10*time.Second)
	var nodes []string
	for i := range count {
		n := fmt.Sprintf("n-%d", i)
		nodes = append(nodes, n)
		s.add(n)
		s.observe(n, lease{}, t0)
	}
	return s, nodes
}

// takeAll takes every node the spreader lets take at now, returning them; as
// runSpread, it then reads each Lease as written, held by the spreader's
// replica.
func takeAll(s *spreader, nodes []string, now time.Time) []string {
	var took []string
	for _, n := range nodes {
		if s.mayTake(n, now) {
			s.taken(n, true)
			s.observe(n, lease{holder: s.me, duration: 10 * time.Second, version: "t-" + n}, now)
			took = append(took, n)
		}
	}
	return took
}

func TestAMemberTakesNothingBeforeItSettlesAndThenNoMoreThanItsShare(t *testing.T) {
	s, nodes := spreadOf("a", 6)
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0)
	if took := takeAll(s, nodes, t0.Add(time.Second)); len(took) != 0 {
		t.Errorf("took %v one second after joining, before settling (2s)", took)
	}
	// A read of the members that began before the settling was over (a slow
	// one) does not settle it, however late the nodes are tried.
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0.Add(1500*time.Millisecond))
	if took := takeAll(s, nodes, t0.Add(5*time.Second)); len(took) != 0 {
		t.Errorf("took %v with a view of the members read 1.5s after joining", took)
	}
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0.Add(2*time.Second))
	if took := takeAll(s, nodes, t0.Add(2*time.Second)); len(took) != 3 {
		t.Errorf("took %v of 6 nodes with two members, want 3", took)
	}
	if took := takeAll(s, nodes, t0.Add(5*time.Second)); len(took) != 0 {
		t.Errorf("took %v more over its share", took)
	}
	// Alone, it takes the rest.
	s.setMembers([]replica{{"a", 0}}, t0.Add(6*time.Second))
	if took := takeAll(s, nodes, t0.Add(6*time.Second)); len(took) != 3 {
		t.Errorf("alone, took %v more, want the 3 left", took)
	}
}

func TestANodeLeftFreeIsTakenAfterALeaseDurationWhateverTheShare(t *testing.T) {
	s, nodes := spreadOf("c", 2)
	// c holds no membership Lease: its share is nothing.
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0)
	if took := takeAll(s, nodes, t0.Add(9*time.Second)); len(took) != 0 {
		t.Errorf("took %v, free for 9s of a 10s grace", took)
	}
	s.observe("n-0", lease{holder: "a", duration: 10 * time.Second, version: "7"}, t0.Add(9*time.Second))
	if took := takeAll(s, nodes, t0.Add(10*time.Second)); !slices.Equal(took, []string{"n-1"}) {
		t.Errorf("took %v after 10s, want n-1, the node nobody took", took)
	}
}

func TestAHeldLeaseExpiresALeaseDurationAfterThisReplicaSawItChange(t *testing.T) {
	l := lease{holder: "b", duration: 10 * time.Second, version: "1"}
	seen := l.since(lease{}, t0)
	seen = l.since(seen, t0.Add(5*time.Second)) // the same version again: not renewed
	if seen.free(t0.Add(9*time.Second)) || !seen.free(t0.Add(10*time.Second)) {
		t.Errorf("a lease seen first at t0 and not renewed: free at 9s %v, at 10s %v; want false, true",
			seen.free(t0.Add(9*time.Second)), seen.free(t0.Add(10*time.Second)))
	}
	renewed := lease{holder: "b", duration: 10 * time.Second, version: "2"}.since(seen, t0.Add(8*time.Second))
	if renewed.free(t0.Add(17 * time.Second)) {
		t.Error("a lease renewed at 8s is free at 17s")
	}
	if !(lease{version: "3"}).free(t0) {
		t.Error("a lease without a holder is not free")
	}
}

// a holds every node; b joins. a gives up exactly its surplus, the same nodes
// every time it is asked, and only once b has settled.
func TestAJoiningMemberIsGivenTheSurplusOnceSettled(t *testing.T) {
	s, nodes := spreadOf("a", 6)
	s.setMembers([]replica{{"a", 0}}, t0)
	s.setMembers([]replica{{"a", 0}}, t0.Add(2*time.Second))
	if took := takeAll(s, nodes, t0.Add(2*time.Second)); len(took) != 6 {
		t.Fatalf("alone, took %v", took)
	}
	join := t0.Add(3 * time.Second)
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, join)
	releasing := func(now time.Time) []string {
		s.setMembers([]replica{{"a", 0}, {"b", 1}}, now) // read again at each try
		var out []string
		for _, n := range nodes {
			if s.shouldRelease(n, now) {
				out = append(out, n)
			}
		}
		return out
	}
	if r := releasing(join.Add(time.Second)); len(r) != 0 {
		t.Errorf("gave up %v to a member that joined 1s ago, before it settled", r)
	}
	first := releasing(join.Add(2 * time.Second))
	if len(first) != 3 {
		t.Fatalf("gives up %v, want its surplus of 3", first)
	}
	if again := releasing(join.Add(3 * time.Second)); !slices.Equal(again, first) {
		t.Errorf("gives up %v, then %v: not the same nodes", first, again)
	}
	s.released(first[0])
	if r := releasing(join.Add(3 * time.Second)); !slices.Equal(r, first[1:]) {
		t.Errorf("after giving %s up, gives up %v, want %v", first[0], r, first[1:])
	}
	// b took the first; once a has given up its surplus, it gives nothing more.
	s.observe(first[0], lease{holder: "b", duration: 10 * time.Second, version: "9"}, join.Add(3*time.Second))
	for _, n := range first[1:] {
		s.released(n)
	}
	if r := releasing(join.Add(4 * time.Second)); len(r) != 0 {
		t.Errorf("at its share, gives up %v", r)
	}
}

func TestNothingIsGivenUpWhenNoMemberIsUnderItsShare(t *testing.T) {
	s, nodes := spreadOf("a", 7)
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0)
	s.setMembers([]replica{{"a", 0}, {"b", 1}}, t0.Add(2*time.Second))
	took := takeAll(s, nodes, t0.Add(2*time.Second))
	if len(took) != 4 { // the tie's extra node is the lower slot's
		t.Fatalf("took %v, want 4 of 7", took)
	}
	for _, n := range nodes[len(took):] {
		s.observe(n, lease{holder: "b", duration: 10 * time.Second, version: "1"}, t0.Add(3*time.Second))
	}
	for _, n := range took {
		if s.shouldRelease(n, t0.Add(5*time.Second)) {
			t.Errorf("gives %s up at 4/3 of 7", n)
		}
	}
	// A third replica's file lists fewer nodes than a's; a sees b under its
	// share only through its own file, so when b is not a member at all a
	// keeps every node.
	s.setMembers([]replica{{"a", 0}}, t0.Add(6*time.Second))
	for _, n := range took {
		if s.shouldRelease(n, t0.Add(9*time.Second)) {
			t.Errorf("gives %s up with nobody to take it", n)
		}
	}
}

// versioned makes a fake clientset behave as the API server with Leases: each
// write gets a new resourceVersion, and an update carrying a stale one is a
// conflict.
func versioned(c *fake.Clientset) {
	var mu sync.Mutex
	rv := 0
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a := a.(type) {
		case k8stesting.UpdateAction:
			l := a.GetObject().(*coordinationv1.Lease)
			old, err := c.Tracker().Get(a.GetResource(), a.GetNamespace(), l.Name)
			if err == nil && old.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), l.Name, fmt.Errorf("stale"))
			}
			rv++
			l.ResourceVersion = strconv.Itoa(rv)
		case k8stesting.CreateAction:
			rv++
			a.GetObject().(*coordinationv1.Lease).ResourceVersion = strconv.Itoa(rv)
		}
		return false, nil, nil
	})
}

// Two replicas and two membership Leases: each takes one; a third finds none
// and is no member. One leaving gives its Lease up and the others count it out
// at their next read; one that stops renewing is counted out a lease duration
// after it was last seen renewing, on the reader's clock.
func TestMembersHoldOneLeaseEachAndAreCountedOutWhenTheyLeaveOrStopRenewing(t *testing.T) {
	c := fake.NewClientset()
	versioned(c)
	clk := clocktesting.NewFakeClock(t0)
	ctx := context.Background()
	join := func(me string) (*membership, *spreader) {
		s := newSpreader(me, 2*time.Second, 10*time.Second)
		ls := &leases{client: c.CoordinationV1(), ns: "ns", me: me, duration: 10 * time.Second, clock: clk}
		return newMembership(ls, "g", 2, s, clk, time.Second, 7*time.Second, slog.New(slog.DiscardHandler)), s
	}
	ma, sa := join("a")
	mb, sb := join("b")
	mc, sc := join("c")
	for _, m := range []*membership{ma, mb, mc, ma, mb, mc} {
		m.tick(ctx)
	}
	if ma.mine != 0 || mb.mine != 1 || mc.mine != -1 {
		t.Fatalf("slots: a %d, b %d, c %d; want 0, 1, none", ma.mine, mb.mine, mc.mine)
	}
	for name, s := range map[string]*spreader{"a": sa, "b": sb, "c": sc} {
		if n := s.memberCount(); n != 2 {
			t.Errorf("%s sees %d members, want 2", name, n)
		}
	}
	ma.leave()
	clk.Step(time.Second)
	mb.tick(ctx)
	mc.tick(ctx)
	if sb.memberCount() != 1 || mc.mine != 0 || sc.memberCount() != 2 {
		t.Fatalf("after a left: b sees %d members, c took slot %d and sees %d", sb.memberCount(), mc.mine, sc.memberCount())
	}
	mb.tick(ctx)
	if sb.memberCount() != 2 {
		t.Errorf("b sees %d members once c joined, want 2", sb.memberCount())
	}
	// c stops renewing (killed): b counts it for 10s after the last renewal it saw.
	for range 9 {
		clk.Step(time.Second)
		mb.tick(ctx)
	}
	if sb.memberCount() != 2 {
		t.Errorf("b counted c out %s after its last renewal, before its lease duration", 9*time.Second)
	}
	clk.Step(time.Second)
	mb.tick(ctx)
	if sb.memberCount() != 1 {
		t.Errorf("b sees %d members 10s after c's last renewal, want 1", sb.memberCount())
	}
}
