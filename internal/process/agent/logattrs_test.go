package agent

import (
	"bytes"
	"log/slog"
	"testing"
)

// logBoth logs the same lines through a plain TextHandler and through one
// wrapped by deferAttrs, and returns both outputs.
func logBoth(t *testing.T, log func(*slog.Logger)) (plain, deferred string) {
	t.Helper()
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	var p, d bytes.Buffer
	log(slog.New(slog.NewTextHandler(&p, &slog.HandlerOptions{ReplaceAttr: noTime})))
	log(slog.New(deferAttrs(slog.NewTextHandler(&d, &slog.HandlerOptions{ReplaceAttr: noTime}))))
	return p.String(), d.String()
}

func TestDeferredAttrsLogAsTheHandlersOwn(t *testing.T) {
	for name, log := range map[string]func(*slog.Logger){
		"no attributes": func(l *slog.Logger) { l.Info("hello", "a", 1) },
		"With, twice": func(l *slog.Logger) {
			l.With("node", "n1").With("component", "pods", "x", 2).Warn("hello", "a", 1, "b", "two words")
		},
		"a group after attributes": func(l *slog.Logger) {
			l.With("node", "n1").WithGroup("g").With("in", true).Error("hello", "a", 1)
		},
		"siblings keep their own": func(l *slog.Logger) {
			base := l.With("node", "n1")
			base.With("component", "a").Info("one")
			base.With("component", "b").Info("two")
			base.Info("three")
		},
		"below the level": func(l *slog.Logger) { l.With("node", "n1").Debug("hidden") },
	} {
		t.Run(name, func(t *testing.T) {
			plain, deferred := logBoth(t, log)
			if plain != deferred {
				t.Errorf("deferred attributes logged\n%s\nwhere the handler logs\n%s", deferred, plain)
			}
		})
	}
}

func TestDeferAttrsWrapsOnce(t *testing.T) {
	h := deferAttrs(slog.NewTextHandler(&bytes.Buffer{}, nil))
	if deferAttrs(h) != h {
		t.Error("a handler already deferring attributes was wrapped again")
	}
}
