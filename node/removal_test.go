package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// markForRemoval annotates and cordons the fixture's node, as
// `vkubelet remove-node` does.
func (f *fixture) markForRemoval() {
	f.t.Helper()
	patch := `{"metadata":{"annotations":{"` + RemovalAnnotation + `":"2026-03-04T05:06:07Z"}},"spec":{"unschedulable":true}}`
	if _, err := f.client.CoreV1().Nodes().Patch(context.Background(), testNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// deleteNodeAndLease deletes the fixture's Node and its Lease, as the removal
// (or the garbage collector, for the Lease) does.
func (f *fixture) deleteNodeAndLease() {
	f.t.Helper()
	ctx := context.Background()
	if err := f.client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// registered runs the controller's first registration and heartbeat.
func registered(f *fixture) *Controller {
	f.t.Helper()
	c := f.newController()
	if err := c.writeNode(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	c.heartbeat(context.Background())
	return c
}

func TestBeingRemovedIsTheAnnotationOnACordonedNode(t *testing.T) {
	for _, tc := range []struct {
		name          string
		annotated     bool
		unschedulable bool
		want          bool
	}{
		{"annotated and cordoned", true, true, true},
		{"annotated, uncordoned since", true, false, false},
		{"cordoned by someone else", false, true, false},
		{"neither", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: tc.unschedulable}}
			if tc.annotated {
				n.Annotations = map[string]string{RemovalAnnotation: "2026-03-04T05:06:07Z"}
			}
			if got := BeingRemoved(n); got != tc.want {
				t.Errorf("BeingRemoved = %v, want %v", got, tc.want)
			}
		})
	}
}

// A Node deleted after it was marked for removal is not registered again, nor
// its Lease created again; the controller writes nothing more.
func TestANodeDeletedWhileMarkedForRemovalIsNotRegisteredAgain(t *testing.T) {
	f := newFixture(t)
	c := registered(f)
	ctx := context.Background()
	f.markForRemoval()
	c.handle(ctx, dueRefresh) // the write reads the mark
	f.deleteNodeAndLease()
	f.client.ClearActions()

	c.handle(ctx, dueNodeGone|dueRenew|dueRefresh)
	f.expectActions("get nodes")
	f.client.ClearActions()
	c.handle(ctx, dueRenew|dueRefresh|dueReported)
	c.heartbeat(ctx)
	f.expectActions()
}

// Between the Lease's deletion and the Node's being seen gone, a renewal does
// not create the Lease again.
func TestALeaseDeletedWhileMarkedForRemovalIsNotCreatedAgain(t *testing.T) {
	f := newFixture(t)
	c := registered(f)
	ctx := context.Background()
	f.markForRemoval()
	c.noteRemoval(true) // as the informer's update does
	if err := f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	c.heartbeat(ctx)
	f.expectActions("update leases", "get leases")
}

// Uncordoning a node marked for removal cancels the removal: deleted later,
// it is registered again.
func TestAnUncordonedNodeIsRegisteredAgainWhenDeleted(t *testing.T) {
	f := newFixture(t)
	c := registered(f)
	ctx := context.Background()
	f.markForRemoval()
	c.handle(ctx, dueRefresh)
	// kubectl uncordon, which leaves the annotation.
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, testNode, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.handle(ctx, dueRefresh)
	f.deleteNodeAndLease()
	f.client.ClearActions()

	c.handle(ctx, dueNodeGone)
	f.expectActions("get nodes", "create nodes", "update leases", "get leases", "create leases")
}

// A process started while its Node is marked for removal, the Node deleted
// before it registered, does not register it: Run goes past the registration
// and writes nothing.
func TestANodeRemovedBeforeTheFirstRegistrationIsNotRegistered(t *testing.T) {
	marked := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-0",
		Annotations: map[string]string{RemovalAnnotation: "2026-03-04T05:06:07Z"}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	f := newFixture(t, marked)
	c := f.newController()
	c.noteRemoval(true) // as the informer's first list does
	if err := f.client.CoreV1().Nodes().Delete(context.Background(), testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Past the registration: the provider is asked for status notices.
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		return f.provider.notifier() != nil, "Run is still registering the node"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, a := range f.actions() {
		if a.GetVerb() == "create" {
			t.Errorf("%s %s after the node was removed", a.GetVerb(), a.GetResource().Resource)
		}
	}
}
