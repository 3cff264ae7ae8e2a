package pod

import (
	"strings"
	"testing"
)

func TestRestartReconcileDeletesProviderPodsTheAPIForgot(t *testing.T) {
	f := newFixture(t, newPod("kept"))
	f.provider.pods["ns/kept"] = newPod("kept")
	f.provider.pods["ns/orphan"] = newPod("orphan")
	f.start()
	if got := f.c.deleteQueue.Len(); got != 1 {
		t.Fatalf("delete queue has %d items, want the orphan", got)
	}
	if err := f.c.deleteHandler(f.ctx, "ns/orphan"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncHandler(f.ctx, "ns/kept"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.provider.callList(), ",")
	if got != "DeletePod ns/orphan" {
		t.Fatalf("provider calls after restart = %s; want only the orphan deleted and nothing created twice", got)
	}
}
