package agent

import (
	"context"
	"log/slog"
)

// deferAttrs wraps h so that the attributes a logger is given with With are
// kept as a list and handed to h with each record it handles, instead of being
// formatted at once. slog's own handlers format them at With, into a copy of
// the handler with a buffer of its own, about 1 KiB each; a node makes a logger
// with its name for each of its parts (node and pod controllers, resolver,
// kubelet API, provider), and a NodeSet's thousand idle nodes kept those
// copies for good while logging next to nothing at the default level. A
// record's output is the same: the attributes come first, in the order given,
// then the record's own.
func deferAttrs(h slog.Handler) slog.Handler {
	if _, ok := h.(*deferredAttrs); ok {
		return h
	}
	return &deferredAttrs{h: h}
}

// deferredAttrs is a handler whose With attributes wait for a record.
type deferredAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

func (d *deferredAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return d.h.Enabled(ctx, level)
}

func (d *deferredAttrs) Handle(ctx context.Context, r slog.Record) error {
	if len(d.attrs) == 0 {
		return d.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(d.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return d.h.Handle(ctx, out)
}

func (d *deferredAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return d
	}
	all := make([]slog.Attr, 0, len(d.attrs)+len(attrs))
	return &deferredAttrs{h: d.h, attrs: append(append(all, d.attrs...), attrs...)}
}

// WithGroup hands the attributes kept so far to the handler, outside the
// group, as a group is opened only after them.
func (d *deferredAttrs) WithGroup(name string) slog.Handler {
	if name == "" {
		return d
	}
	h := d.h
	if len(d.attrs) > 0 {
		h = h.WithAttrs(d.attrs)
	}
	return &deferredAttrs{h: h.WithGroup(name)}
}
