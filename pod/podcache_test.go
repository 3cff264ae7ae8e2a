package pod

import (
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// undecodable is a copy of c whose pod cannot be decoded.
func undecodable(c *podwire.Pod) *podwire.Pod { return podwire.Undecodable(c) }

func TestATombstoneWithoutAnObjectStillStopsThePod(t *testing.T) {
	f := newFixture(t)
	f.start()
	f.c.handleDeletedPod(cache.DeletedFinalStateUnknown{Key: "ns/gone"})
	if n := f.c.deleteQueue.Len(); n != 1 {
		t.Fatalf("delete queue holds %d keys, want 1", n)
	}
	if key, _ := f.c.deleteQueue.Get(); key != "ns/gone" {
		t.Fatalf("queued %q, want ns/gone", key)
	}
}
