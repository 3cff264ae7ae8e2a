package unixtime

import (
	"testing"
	"time"
)

func TestAnInstantIsTheTimeToTheNanosecond(t *testing.T) {
	for _, tt := range []time.Time{
		time.Date(2026, 11, 26, 5, 0, 0, 123456789, time.UTC),
		time.Date(2026, 11, 26, 6, 0, 0, 1, time.FixedZone("CET", 3600)),
		time.Now(),
	} {
		got := Of(tt).Time()
		if !got.Equal(tt) || got.Location() != time.UTC {
			t.Errorf("Of(%v).Time() = %v, want the same instant in UTC", tt, got)
		}
	}
	if got := Of(time.Time{}); got != 0 || !got.IsZero() || !got.Time().IsZero() {
		t.Errorf("the zero time is %d, back %v", got, got.Time())
	}
	a, b := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)
	if !(Of(a) < Of(b)) {
		t.Error("instants do not order as their times")
	}
}
