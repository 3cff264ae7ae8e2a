package fleet

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// lease is what a replica read of a Lease, and when.
type lease struct {
	holder   string
	duration time.Duration
	// version is the Lease's resourceVersion: any write, a renewal included,
	// changes it.
	version string
	// at is when this replica first read this version. A Lease is counted as
	// expired from then, on this replica's clock, never from the renewal time
	// the holder wrote with its own: clocks of replicas may differ, the
	// duration they measure does not (client-go's leader election does the
	// same).
	at time.Time
}

// since returns l read at now after prev: a version seen before keeps the
// time it was first seen.
func (l lease) since(prev lease, now time.Time) lease {
	if l.version != "" && l.version == prev.version {
		l.at = prev.at
	} else {
		l.at = now
	}
	return l
}

// free says whether a replica may take the Lease at now: nobody holds it, or
// its holder has not renewed it for its duration.
func (l lease) free(now time.Time) bool {
	return l.holder == "" || now.Sub(l.at) >= l.duration
}

// leases reads and writes election Leases of one namespace as one replica.
type leases struct {
	client   coordinationclient.LeasesGetter
	ns, me   string
	duration time.Duration
	clock    clock.PassiveClock
}

// get returns the Lease called name and what it says, an empty lease if
// there is none.
func (ls *leases) get(ctx context.Context, name string) (*coordinationv1.Lease, lease, error) {
	l, err := ls.client.Leases(ls.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, lease{}, nil
	}
	if err != nil {
		return nil, lease{}, fmt.Errorf("lease %s/%s: %w", ls.ns, name, err)
	}
	return l, read(l), nil
}

func read(l *coordinationv1.Lease) lease {
	return lease{
		holder:   ptr.Deref(l.Spec.HolderIdentity, ""),
		duration: time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second,
		version:  l.ResourceVersion,
	}
}

// take makes this replica the holder of the Lease called name, last read as
// cur (nil: there was none). The write carries cur's resourceVersion, so of
// two replicas taking the same Lease one fails with a conflict.
func (ls *leases) take(ctx context.Context, name string, cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	now := metav1.NewMicroTime(ls.clock.Now())
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(ls.me),
		LeaseDurationSeconds: ptr.To(int32(ls.duration / time.Second)),
		AcquireTime:          &now,
		RenewTime:            &now,
	}
	if cur == nil {
		l, err := ls.client.Leases(ls.ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ls.ns}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("taking lease %s/%s: %w", ls.ns, name, err)
		}
		return l, nil
	}
	l := cur.DeepCopy()
	spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	l.Spec = spec
	l, err := ls.client.Leases(ls.ns).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("taking lease %s/%s: %w", ls.ns, name, err)
	}
	return l, nil
}

// renew writes a new renewal time into cur, a Lease this replica holds.
func (ls *leases) renew(ctx context.Context, cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l := cur.DeepCopy()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(ls.clock.Now()))
	l.Spec.LeaseDurationSeconds = ptr.To(int32(ls.duration / time.Second))
	l, err := ls.client.Leases(ls.ns).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renewing lease %s/%s: %w", ls.ns, cur.Name, err)
	}
	return l, nil
}

// release empties the Lease called name if this replica still holds it, so
// that another replica may take it at its next try (as client-go's
// ReleaseOnCancel and this package's release do for the per-node election).
// It reads the Lease again rather than trust a copy: a Lease lost meanwhile is
// left to its new holder.
func (ls *leases) release(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cur, l, err := ls.get(ctx, name)
	if err != nil || cur == nil || l.holder != ls.me {
		return err
	}
	cur = cur.DeepCopy()
	now := metav1.NewMicroTime(ls.clock.Now())
	cur.Spec.HolderIdentity = ptr.To("")
	cur.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	cur.Spec.RenewTime = &now
	if _, err := ls.client.Leases(ls.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("releasing lease %s/%s: %w", ls.ns, name, err)
	}
	return nil
}
