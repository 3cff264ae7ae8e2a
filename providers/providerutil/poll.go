package providerutil

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollEvery calls poll at once and then every interval, in a goroutine, until ctx
// ends; a failure is logged (as what, "polling the plugin for statuses" say) and
// the next tick tries again. Providers whose back end cannot push changes use it
// to implement NotifyPods.
func PollEvery(ctx context.Context, interval time.Duration, log *slog.Logger, what string, poll func(context.Context) error) {
	// Not sliding: a tick every interval however long a poll takes, as a ticker.
	go wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if err := poll(ctx); err != nil && ctx.Err() == nil {
			log.Warn(what, "error", err)
		}
	}, interval)
}
