package pod

import "testing"

// Fingerprints of statuses, as podwire.Pod's StatusHash gives them.
const (
	ourStatus   uint64 = 0x0a
	theirStatus uint64 = 0x0b
)

// written is an echo after a write of ourStatus that returned.
func written() *statusEcho {
	var e statusEcho
	e.writeStarts()
	e.writeEnds(ourStatus)
	return &e
}

// An update that brings the status we wrote is our write coming back: nothing
// to check. Another status is someone else's change, to be checked.
func TestAnUpdateWithTheStatusWrittenIsOurEcho(t *testing.T) {
	e := written()
	if !e.pending {
		t.Fatal("after a write its echo is not pending")
	}
	if e.isEcho(theirStatus) {
		t.Error("someone else's status was taken as our echo")
	}
	if !e.isEcho(ourStatus) {
		t.Error("the status written was not taken as our echo")
	}
	if e.pending {
		t.Error("the echo is still pending once it came")
	}
}

// A write whose fingerprint is not known (client-go's fakes, a failed write)
// leaves no echo to wait for and recognises none.
func TestAWriteOfUnknownStatusLeavesNoEcho(t *testing.T) {
	var e statusEcho
	e.writeStarts()
	e.writeEnds(0)
	if e.pending {
		t.Error("an unknown write's echo is pending")
	}
	if e.isEcho(ourStatus) {
		t.Error("an update was taken as the echo of an unknown write")
	}
}

// The watch can bring the echo before the write returns: an update during a
// write is taken as ours, and the writer has the pod checked again unless the
// write succeeded, the cache shows it and the check that made it was not stale.
func TestAnUpdateDuringAWriteIsLeftToTheWriter(t *testing.T) {
	cases := []struct {
		name          string
		failed, shown bool
		stale         bool
		want          bool
	}{
		{name: "echo shown", shown: true},
		{name: "write failed", failed: true, want: true},
		{name: "cache shows another status", want: true},
		{name: "write made by a stale check", shown: true, stale: true, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e statusEcho
			e.staleCheck = tc.stale
			e.writeStarts()
			if !e.isEcho(theirStatus) {
				t.Fatal("an update during the write was not taken as ours")
			}
			w := e.writeEnds(ourStatus)
			if got := w.recheck(tc.failed, tc.shown); got != tc.want {
				t.Errorf("recheck = %v, want %v", got, tc.want)
			}
			if e.writing || e.updatedWhileWriting {
				t.Error("the write is still recorded in flight")
			}
		})
	}
	// No update during the write: nothing to check again, whatever happened.
	var e statusEcho
	e.writeStarts()
	if w := e.writeEnds(ourStatus); w.recheck(true, false) {
		t.Error("a write with no update meanwhile asked for a check")
	}
}

// A check made while the last write's echo is on its way compares with a
// cache older than the API: the echo it missed is then checked, not taken as
// ours, and only once.
func TestTheEchoAStaleCheckMissedIsChecked(t *testing.T) {
	e := written()
	e.checkStarts()
	e.cacheRead(theirStatus) // the cache still shows the status before the write
	if e.isEcho(ourStatus) {
		t.Fatal("the echo a stale check missed was taken as ours")
	}
	if e.staleCheck || e.pending {
		t.Fatal("the stale check is still recorded after the echo came")
	}
	if !e.isEcho(ourStatus) {
		t.Error("a later update with the same status was not taken as ours")
	}
}

// A check that reads a cache already showing the write is up to date, even
// though the echo had not been seen.
func TestACheckOfACacheShowingTheWriteIsUpToDate(t *testing.T) {
	e := written()
	e.checkStarts()
	e.cacheRead(ourStatus)
	if !e.isEcho(ourStatus) {
		t.Error("the echo was not taken as ours after an up-to-date check")
	}
}

// A check with no write pending is not stale: the cache then shows the API's
// status, or someone else's later one.
func TestACheckWithNoEchoPendingIsNotStale(t *testing.T) {
	e := written()
	e.isEcho(ourStatus) // the echo came
	e.checkStarts()
	if e.staleCheck {
		t.Error("a check after the echo came was taken as stale")
	}
}

// The echo is forgotten once the cache shows the write; a later write's echo
// is not forgotten by an earlier one shown late.
func TestAnEchoIsForgottenOnceTheCacheShowsIt(t *testing.T) {
	e := written()
	e.shown(ourStatus)
	if e.pending {
		t.Error("the echo is pending though the cache shows the write")
	}
	e.writeStarts()
	e.writeEnds(theirStatus) // the next write
	e.shown(ourStatus)
	if !e.pending {
		t.Error("the echo of the last write was forgotten when an earlier one was shown")
	}
}

// The echo is part of the pod's state: forgetting the pod forgets it.
func TestAnEchoIsForgottenWithItsPod(t *testing.T) {
	s := newStateStore()
	s.update("ns/a", func(st *podState) {})
	s.echo("ns/a", func(e *statusEcho) { e.writeStarts(); e.writeEnds(ourStatus) })
	s.forget("ns/a")
	own := false
	s.echo("ns/a", func(e *statusEcho) { own = e.isEcho(ourStatus) })
	if own {
		t.Error("a forgotten pod's echo was recognised")
	}
	if st := s.get("ns/a"); st.echo != (statusEcho{}) {
		t.Errorf("a forgotten pod has echo %+v", st.echo)
	}
}
