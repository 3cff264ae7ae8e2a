package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// LeaderElection lets replicas share the nodes of one configuration: each node
// runs in one replica at a time, the one holding the node's Lease
// <Namespace>/vkubelet-<node>. When that replica dies, another takes the node over
// once the Lease has expired; stopped cleanly, a replica gives its Leases up at
// once. A node taken over starts as after a restart: its provider's pods are
// adopted by the startup reconcile, not created again.
type LeaderElection struct {
	Client    kubernetes.Interface
	Namespace string
	// Identity names this replica in the Leases (host name and process).
	Identity string
	// As client-go's leader election: a holder renews within RenewDeadline, others
	// try every RetryPeriod and take over LeaseDuration after the last renewal.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Replicas, if above 0, spreads the nodes over the replicas (spread.go):
	// each replica holding one of Replicas membership Leases
	// <Namespace>/<Group>-replica-<i> runs about its share of the nodes. 0: the
	// first replica to start takes every node, the others stand by.
	Replicas int
	// Group names the replicas sharing one configuration, in their membership
	// Leases' names. Default "vkubelet".
	Group string
}

// LeaseName is the name of node's election Lease.
func LeaseName(node string) string { return "vkubelet-" + node }

// errLost says a node's Lease was lost while the node ran here.
var errLost = errors.New("lost the node's lease")

// runHeld runs the node only while this replica holds its Lease, and returns when
// ctx ends (the Lease given up), when the Lease is lost, or when the node fails
// (the Lease given up, so that another replica may try).
func (f *Fleet) runHeld(ctx context.Context, m *member, cfg agent.Config, ready func()) error {
	le := f.cfg.LeaderElection
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: LeaseName(cfg.NodeName)},
		Client:     le.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	var (
		mu      sync.Mutex
		closing bool
		done    chan struct{}
		runErr  error
	)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: cfg.NodeName,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(hctx context.Context) {
				// client-go starts this in a goroutine and does not wait for it:
				// runHeld does, so that the node has stopped before the Lease is
				// given up and another replica starts it.
				mu.Lock()
				if closing || hctx.Err() != nil {
					mu.Unlock()
					return
				}
				done = make(chan struct{})
				mu.Unlock()
				defer close(done)
				m.standby.Store(false)
				f.log(cfg.NodeName).Info("holding the node's lease: running it", "lease", le.Namespace+"/"+LeaseName(cfg.NodeName))
				runErr = f.cfg.Run(hctx, cfg, ready)
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	m.standby.Store(true)
	elector.Run(lctx)
	mu.Lock()
	closing = true
	held := done
	mu.Unlock()
	if held == nil {
		return nil // never held: ctx ended while waiting
	}
	<-held
	m.standby.Store(true)
	// Given up once the node has stopped (client-go's ReleaseOnCancel would give
	// it up while the node still runs).
	release(lock, le.Identity)
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return nil
	}
	return errLost
}

// release empties the Lease if this replica still holds it, as client-go's
// ReleaseOnCancel does: the next replica takes it at its next try.
func release(lock *resourcelock.LeaseLock, identity string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil || rec.HolderIdentity != identity {
		return
	}
	now := metav1.NewTime(time.Now())
	_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	})
}

// Holder returns the replica holding node's Lease, or "" if none.
func Holder(ctx context.Context, c kubernetes.Interface, namespace, node string) (string, error) {
	l, err := c.CoordinationV1().Leases(namespace).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// checkLeaderElection validates le, filling in the defaults of a kubelet-like
// 40 s lease.
func checkLeaderElection(le *LeaderElection) error {
	if le.Client == nil || le.Namespace == "" || le.Identity == "" {
		return fmt.Errorf("leader election: a client, a namespace and an identity are required")
	}
	if le.Replicas < 0 {
		return fmt.Errorf("leader election: %d replicas", le.Replicas)
	}
	if le.Group == "" {
		le.Group = "vkubelet"
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 40 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = le.LeaseDuration * 3 / 4
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = max(le.LeaseDuration/10, time.Second)
	}
	if !(le.LeaseDuration > le.RenewDeadline && float64(le.RenewDeadline) > 1.2*float64(le.RetryPeriod)) {
		return fmt.Errorf("leader election: want lease duration > renew deadline > 1.2 × retry period, have %s, %s, %s",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod)
	}
	return nil
}
