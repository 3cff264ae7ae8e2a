package providerutil

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// PollEvery polls at once and then every interval, however long a poll takes, logs
// a failure and goes on, and stops with its context (synctest's clock measures).
func TestPollEveryPollsAtOnceThenEveryIntervalUntilTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		log := slog.New(slog.NewTextHandler(&out, nil))
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var polls []time.Duration
		PollEvery(ctx, 10*time.Second, log, "polling the back end", func(context.Context) error {
			polls = append(polls, time.Since(start))
			time.Sleep(3 * time.Second) // a slow back end
			if len(polls) == 2 {
				return errors.New("back end away")
			}
			return nil
		})
		time.Sleep(35 * time.Second)
		cancel()
		synctest.Wait()
		want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second}
		if len(polls) != len(want) {
			t.Fatalf("polls at %v, want at %v", polls, want)
		}
		for i := range want {
			if polls[i] != want[i] {
				t.Errorf("poll %d at %s, want %s", i+1, polls[i], want[i])
			}
		}
		if n := strings.Count(out.String(), "back end away"); n != 1 {
			t.Errorf("the failure is logged %d times, want once:\n%s", n, &out)
		}
		time.Sleep(time.Minute)
		if len(polls) != len(want) {
			t.Errorf("%d polls after the context ended, want none", len(polls)-len(want))
		}
	})
}
