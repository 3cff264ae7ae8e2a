// Package unixtime keeps times in 8 bytes: nanoseconds since the Unix epoch,
// where a time.Time takes 24 (its wall clock, its monotonic reading and its
// location). For times kept per pod by the thousand (the mock's records, the
// resolver's token deadlines), compared with the same clock's Now and never
// across a change of the wall clock that matters.
package unixtime

import "time"

// Instant is a time as nanoseconds since the Unix epoch; zero is the zero time
// (the epoch itself cannot be told from it, which no clock in use gives).
type Instant int64

// Of returns t as an Instant; its monotonic reading and location are dropped.
func Of(t time.Time) Instant {
	if t.IsZero() {
		return 0
	}
	return Instant(t.UnixNano())
}

// Time returns the instant as a time.Time in UTC, the zero time for zero.
func (i Instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(i)).UTC()
}

// IsZero reports whether i is the zero time.
func (i Instant) IsZero() bool { return i == 0 }
