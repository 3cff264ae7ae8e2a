package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/leakcheck"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
)

// The election's timing in these tests: a node of a replica that vanishes is
// taken within leaseDuration + 3.6 retry periods (docs/NODESETS.md).
const (
	leaseDuration = 5 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
	stopTime      = 300 * time.Millisecond
)

// interval is a stretch of time one replica ran one node.
type interval struct {
	replica  string
	from, to time.Time // to: zero while it runs
}

func (iv interval) String() string {
	to := "running"
	if !iv.to.IsZero() {
		to = iv.to.Format(time.StampMicro)
	}
	return fmt.Sprintf("%s (%s–%s)", iv.replica, iv.from.Format(time.StampMicro), to)
}

// runs records, per node, when each replica ran it: the nodes are fakes that
// run until their context ends and then take stopTime to stop, as an agent
// takes a while (a replica giving a node's Lease up before its node has
// stopped would be seen running it beside the next holder).
type runs struct {
	mu    sync.Mutex
	byKey map[string][]interval
}

func (r *runs) runner(replica string) func(context.Context, agent.Config, func()) error {
	return func(ctx context.Context, cfg agent.Config, ready func()) error {
		r.mu.Lock()
		r.byKey[cfg.NodeName] = append(r.byKey[cfg.NodeName], interval{replica: replica, from: time.Now()})
		i := len(r.byKey[cfg.NodeName]) - 1
		r.mu.Unlock()
		ready()
		<-ctx.Done()
		time.Sleep(stopTime) // the node stopping
		r.mu.Lock()
		r.byKey[cfg.NodeName][i].to = time.Now()
		r.mu.Unlock()
		return nil
	}
}

func (r *runs) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, node := range slices.Sorted(maps.Keys(r.byKey)) {
		fmt.Fprintf(&b, "\n%s: %v", node, r.byKey[node])
	}
	return b.String()
}

// running returns how many nodes each replica runs now.
func (r *runs) running() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, ivs := range r.byKey {
		for _, iv := range ivs {
			if iv.to.IsZero() {
				out[iv.replica]++
			}
		}
	}
	return out
}

func (r *runs) starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ivs := range r.byKey {
		n += len(ivs)
	}
	return n
}

// overlapping returns, for node, whether a replica other than holder ran it
// at t (the holder's acquisition time).
func (r *runs) overlapping(node, holder string, t time.Time) []interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []interval
	for _, iv := range r.byKey[node] {
		to := iv.to.Truncate(time.Microsecond)
		if iv.replica != holder && iv.from.Before(t) && (iv.to.IsZero() || to.After(t)) {
			out = append(out, iv)
		}
	}
	return out
}

// checkNoOverlap fails t if two replicas ever ran one node at once.
func (r *runs) checkNoOverlap(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for node, ivs := range r.byKey {
		for i, a := range ivs {
			for _, b := range ivs[i+1:] {
				aEnd, bEnd := a.to, b.to
				if aEnd.IsZero() {
					aEnd = time.Now()
				}
				if bEnd.IsZero() {
					bEnd = time.Now()
				}
				if a.from.Before(bEnd) && b.from.Before(aEnd) {
					t.Errorf("node %s ran in %s and %s at once", node, a, b)
				}
			}
		}
	}
}

// spreadEnv is replicas of one configuration sharing nodes through a
// namespace's Leases on the real API server.
type spreadEnv struct {
	t     *testing.T
	ns    string
	nodes []nodeconfig.Node
	runs  *runs
}

func newSpreadEnv(t *testing.T, count int) *spreadEnv {
	e := &spreadEnv{t: t, ns: testenv.Namespace(t), runs: &runs{byKey: map[string][]interval{}}}
	for i := range count {
		e.nodes = append(e.nodes, nodeconfig.Node{Name: fmt.Sprintf("n-%d", i)})
	}
	return e
}

// replica is one replica: cut makes every request of its client fail, as if
// the process were gone.
type replicaOf struct {
	fleet  *Fleet
	ctx    context.Context
	cancel context.CancelFunc
	cut    *atomic.Bool
}

// start starts replica name over the nodes, with room for slots members.
func (e *spreadEnv) start(name string, slots int) *replicaOf {
	cfg := rest.CopyConfig(testenv.ControlPlane(e.t).RESTConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	// The credentials as bytes: a client of files whose transport cannot be
	// shared (it is wrapped) watches them with a goroutine that outlives it.
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&cfg.CertFile, &cfg.CertData}, {&cfg.KeyFile, &cfg.KeyData}, {&cfg.CAFile, &cfg.CAData}} {
		if *f.file != "" {
			b, err := os.ReadFile(*f.file)
			if err != nil {
				e.t.Fatal(err)
			}
			*f.file, *f.data = "", b
		}
	}
	cut := &atomic.Bool{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if cut.Load() {
				return nil, errors.New("cut off")
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	f := mustNew(e.t, Config{Run: e.runs.runner(name), Logger: slog.Default().With("replica", name),
		LeaderElection: &LeaderElection{Client: c, Namespace: e.ns, Identity: name, Group: "spread", Replicas: slots,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}})
	ctx, cancel := context.WithCancel(context.Background())
	f.Apply(ctx, e.nodes)
	r := &replicaOf{fleet: f, ctx: ctx, cancel: cancel, cut: cut}
	e.t.Cleanup(r.stop)
	return r
}

// stop stops the replica as SIGTERM does: it leaves, stops its nodes and
// gives their Leases up.
func (r *replicaOf) stop() {
	r.cancel()
	r.fleet.Stop()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// waitRunning waits until the replicas run the nodes as want says, and
// returns how long that took.
func (e *spreadEnv) waitRunning(want map[string]int, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	testenv.Eventually(e.t, timeout, func() (bool, string) {
		got := e.runs.running()
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("replicas run %v nodes, want %v", got, want)
	})
	return time.Since(start)
}

// watchLeases checks every change of holder of the nodes' Leases until the
// test ends: the new holder took the Lease when no other replica ran the node,
// and took it from another replica directly only once that replica's hold had
// run out (its last renewal plus its lease duration).
func (e *spreadEnv) watchLeases() {
	c := testenv.Client(e.t)
	w, err := c.CoordinationV1().Leases(e.ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	e.t.Cleanup(func() {
		w.Stop()
		<-done
		e.runs.checkNoOverlap(e.t)
	})
	go func() {
		defer close(done)
		last := map[string]coordinationv1.LeaseSpec{}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Deleted || !slices.ContainsFunc(e.nodes, func(n nodeconfig.Node) bool { return LeaseName(n.Name) == l.Name }) {
				continue
			}
			node := l.Name[len("vkubelet-"):]
			prev, now := last[l.Name], l.Spec
			last[l.Name] = now
			was, is := ptr.Deref(prev.HolderIdentity, ""), ptr.Deref(now.HolderIdentity, "")
			if is == "" || is == was || now.AcquireTime == nil {
				continue
			}
			at := now.AcquireTime.Time
			if o := e.runs.overlapping(node, is, at); len(o) > 0 {
				e.t.Errorf("%s took node %s at %s while %v still ran it", is, node, at.Format(time.StampMicro), o)
			}
			if was != "" && prev.RenewTime != nil {
				if out := prev.RenewTime.Add(time.Duration(ptr.Deref(prev.LeaseDurationSeconds, 0)) * time.Second); at.Before(out) {
					t := e.t
					t.Errorf("%s took node %s from %s at %s, before %s's hold ran out at %s", is, node, was,
						at.Format(time.StampMicro), was, out.Format(time.StampMicro))
				}
			}
		}
	}()
}

// A second replica joining takes half the nodes, handed over by the first;
// when it stops (SIGTERM), it gives them back at once, without waiting for
// their Leases to expire. Stopped, the replicas leave no goroutine behind.
func TestAJoiningReplicaTakesItsShareAndALeavingOneHandsItBack(t *testing.T) {
	e := newSpreadEnv(t, 6)
	e.watchLeases()
	before := leakcheck.Take() // the test's own clients made
	a := e.start("a", 3)
	took := e.waitRunning(map[string]int{"a": 6}, 30*time.Second)
	t.Logf("a alone ran the 6 nodes %s after it started", took.Round(time.Millisecond))
	b := e.start("b", 3)
	took = e.waitRunning(map[string]int{"a": 3, "b": 3}, 30*time.Second)
	t.Logf("b joined: 3/3 %s after it started", took.Round(time.Millisecond))
	if s := e.runs.starts(); s != 9 {
		t.Errorf("%d starts of a node, want 9: 6 in a, then 3 handed over; %s", s, e.runs)
	}
	left := time.Now()
	b.stop()
	back := time.Since(left)
	took = e.waitRunning(map[string]int{"a": 6}, 30*time.Second)
	t.Logf("b left (stopped in %s): a ran the 6 nodes %s after it began stopping", back.Round(time.Millisecond), (back + took).Round(time.Millisecond))
	// Handed back, not expired: within a few retry periods, well within a
	// lease duration.
	if back+took >= leaseDuration {
		t.Errorf("a ran b's nodes %s after b began stopping: no sooner than their Leases would expire (%s)", back+took, leaseDuration)
	}
	a.stop()
	before.Check(t, 15*time.Second)
}

// Three replicas starting together settle on 2/2/2 without running any node
// twice: none takes a node before it has seen the others join.
func TestReplicasStartingTogetherRunEachNodeOnce(t *testing.T) {
	e := newSpreadEnv(t, 6)
	e.watchLeases()
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", "c"} {
		wg.Go(func() { e.start(name, 3) })
	}
	wg.Wait()
	took := e.waitRunning(map[string]int{"a": 2, "b": 2, "c": 2}, 30*time.Second)
	t.Logf("2/2/2 %s after the three started", took.Round(time.Millisecond))
	if s := e.runs.starts(); s != 6 {
		t.Errorf("%d starts of a node for 6 nodes: some node was handed over while the replicas started; %s", s, e.runs)
	}
}

// A replica that vanishes without giving anything up (its client cut, then
// stopped: nothing it writes reaches the API server, as after SIGKILL) has its
// nodes taken by the others once its Leases have expired, and not before.
func TestAVanishedReplicasNodesAreTakenOnceTheirLeasesExpire(t *testing.T) {
	e := newSpreadEnv(t, 6)
	e.watchLeases()
	for _, name := range []string{"a", "b"} {
		e.start(name, 3)
	}
	c := e.start("c", 3)
	e.waitRunning(map[string]int{"a": 2, "b": 2, "c": 2}, 30*time.Second)
	killed := time.Now()
	c.cut.Store(true)
	c.stop()
	e.waitRunning(map[string]int{"a": 3, "b": 3}, 30*time.Second)
	took := time.Since(killed)
	t.Logf("a and b ran c's nodes %s after c vanished (lease %s, retry %s)", took.Round(time.Millisecond), leaseDuration, retryPeriod)
	// A survivor counts c out, and finds each of its Leases expired, at most
	// 2.4 retry periods after the lease ran out (docs/NODESETS.md), one try
	// apart at worst; a second for a busy API server.
	if bound := leaseDuration + retryPeriod*36/10 + time.Second; took > bound {
		t.Errorf("c's nodes were taken %s after it vanished, over the bound of %s", took, bound)
	}
}

// A changed NodeSet (SIGHUP) is spread too: two replicas running 2/2 of four
// nodes run 4/4 once both apply a file of eight, and 1/1 once both apply a
// file of two; the removed nodes stop and their Leases are given up.
func TestAChangedNodeSetIsSpreadAgain(t *testing.T) {
	e := newSpreadEnv(t, 8)
	e.watchLeases()
	all := e.nodes
	e.nodes = all[:4]
	a, b := e.start("a", 2), e.start("b", 2)
	e.waitRunning(map[string]int{"a": 2, "b": 2}, 30*time.Second)
	a.fleet.Apply(a.ctx, all)
	b.fleet.Apply(b.ctx, all)
	took := e.waitRunning(map[string]int{"a": 4, "b": 4}, 30*time.Second)
	t.Logf("eight nodes: 4/4 %s after the change", took.Round(time.Millisecond))
	a.fleet.Apply(a.ctx, all[:2])
	b.fleet.Apply(b.ctx, all[:2])
	took = e.waitRunning(map[string]int{"a": 1, "b": 1}, 30*time.Second)
	t.Logf("two nodes: 1/1 %s after the change", took.Round(time.Millisecond))
	c := testenv.Client(t)
	for _, n := range all[2:] {
		if h, err := Holder(context.Background(), c, e.ns, n.Name); err != nil || h != "" {
			t.Errorf("the Lease of removed node %s: holder %q, error %v; want given up", n.Name, h, err)
		}
	}
}
