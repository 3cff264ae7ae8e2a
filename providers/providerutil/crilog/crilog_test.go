package crilog

import (
	"testing"
	"time"
)

func TestLogParserJoinsPartialLinesAndWaitsForIncompleteRecords(t *testing.T) {
	var lp Parser
	got := lp.Feed([]byte("2026-01-02T03:04:05.000000001Z stdout P hel"))
	got = append(got, lp.Feed([]byte("lo\n2026-01-02T03:04:05.5Z stdout F  world\n2026-01-02T03:04:06Z stderr F second\nnot a log line\n"))...)
	if len(got) != 2 {
		t.Fatalf("got %d lines: %v", len(got), got)
	}
	if string(got[0].Msg) != "hello world\n" || got[0].At != time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC) {
		t.Errorf("first line = %q at %s", got[0].Msg, got[0].At)
	}
	if string(got[1].Msg) != "second\n" {
		t.Errorf("second line = %q", got[1].Msg)
	}
}
