package remote

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/vkubelet/vkubelet/providers/providerutil"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// capsAPI answers Capabilities from its failures-th call on, noting when each came.
type capsAPI struct {
	pb.ProviderClient
	failures int
	calls    []time.Time
}

func (a *capsAPI) Capabilities(context.Context, *pb.CapabilitiesRequest, ...grpc.CallOption) (*pb.CapabilitiesResponse, error) {
	a.calls = append(a.calls, time.Now())
	if len(a.calls) <= a.failures {
		return nil, errors.New("connection refused")
	}
	return &pb.CapabilitiesResponse{}, nil
}

// awaitCaps asks again from 1s, doubling, up to 30s, each wait up to 20% longer
// at random (synctest's clock measures the waits).
func TestAwaitCapsBacksOffWithJitterFromOneToThirtySeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &capsAPI{failures: 7}
		c := &Client{cfg: Config{Timeout: providerutil.Duration{Duration: time.Second}}, api: api}
		start := time.Now()
		c.awaitCaps(context.Background())
		if len(api.calls) != 8 {
			t.Fatalf("%d calls, want 8 (seven failures, then the answer)", len(api.calls))
		}
		jittered := false
		last := start
		for i, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
			want *= time.Second
			got := api.calls[i].Sub(last)
			last = api.calls[i]
			if got < want || got > want*6/5 {
				t.Errorf("wait %d: %s, want %s to %s", i+1, got, want, want*6/5)
			}
			jittered = jittered || got != want
		}
		if !jittered {
			t.Error("every wait is exactly its base: no jitter")
		}
	})
}
