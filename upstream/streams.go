package upstream

import (
	"context"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"

	"github.com/vkubelet/vkubelet/provider"
)

// logOptions are vkubelet's log options in upstream's form. Upstream cannot say
// "no lines" (its Tail 0 means all of them), so tailLines=0 asks for the lines
// written from now on, which is what it means with follow and, without, comes to
// nothing or next to nothing. A sinceTime is passed on to the second, as
// upstream's handler parses it.
func logOptions(o provider.ContainerLogOpts, now time.Time) api.ContainerLogOpts {
	up := api.ContainerLogOpts{
		Tail:         o.Tail,
		LimitBytes:   int(o.LimitBytes),
		Timestamps:   o.Timestamps,
		Follow:       o.Follow,
		Previous:     o.Previous,
		SinceSeconds: int(o.SinceSeconds),
	}
	if o.SinceTime != nil {
		up.SinceTime = *o.SinceTime
	}
	if o.TailSet && o.Tail == 0 {
		up.SinceSeconds, up.SinceTime = 0, now
	}
	return up
}

// attachIO is vkubelet's AttachIO as upstream's api.AttachIO: the same streams,
// and terminal sizes passed on from vkubelet's channel to one of upstream's type.
type attachIO struct {
	provider.AttachIO
	resize chan api.TermSize
}

// upstreamAttachIO adapts streams for a session that lasts as long as ctx.
func upstreamAttachIO(ctx context.Context, streams provider.AttachIO) *attachIO {
	a := &attachIO{AttachIO: streams}
	in := streams.Resize()
	if !streams.TTY() || in == nil {
		return a
	}
	a.resize = make(chan api.TermSize)
	go func() {
		for {
			select {
			case s, ok := <-in:
				if !ok {
					return
				}
				select {
				case a.resize <- api.TermSize{Width: s.Width, Height: s.Height}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return a
}

func (a *attachIO) Resize() <-chan api.TermSize { return a.resize }

var _ api.AttachIO = (*attachIO)(nil)
