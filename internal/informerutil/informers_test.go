package informerutil

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func TestInformersRunUntilStoppedAndShutdownWaitsForThem(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1"}})
	nodes := coreinformers.NewNodeInformer(client, 0, cache.Indexers{})
	pods := coreinformers.NewPodInformer(client, metav1.NamespaceAll, 0, cache.Indexers{})
	var g Informers
	g.Add(nodes, pods)
	stop := make(chan struct{})
	g.Start(stop)
	g.Start(stop) // a second Start runs nothing twice
	if !g.WaitForCacheSync(stop) {
		t.Fatal("the informers did not sync")
	}
	if len(nodes.GetStore().List()) != 1 || len(pods.GetStore().List()) != 1 {
		t.Fatalf("cached %d nodes and %d pods, want 1 and 1", len(nodes.GetStore().List()), len(pods.GetStore().List()))
	}

	done := make(chan struct{})
	go func() { g.Shutdown(); close(done) }()
	select {
	case <-done:
		t.Fatal("Shutdown returned while the informers ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return once the informers were stopped")
	}
	if !nodes.IsStopped() || !pods.IsStopped() {
		t.Error("Shutdown returned before the informers stopped")
	}

	late := coreinformers.NewNodeInformer(client, 0, cache.Indexers{})
	g.Add(late)
	g.Start(make(chan struct{}))
	if g.started[late] {
		t.Error("an informer was started after Shutdown")
	}
}
