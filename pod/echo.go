package pod

// statusEcho tells, for one pod, our own status writes coming back through the
// watch from changes someone else made. A write we made brings an update of the
// pod whose status is the one written: there is nothing to check against the
// provider, and checking it would cost a status check per write. Any other
// change of the status (the node-lifecycle controller marking the pod not
// Ready, say) is checked, and put right if the provider says otherwise.
//
// Two races make "the status we wrote" not enough:
//
//   - the echo can come before the write returns (the watch is faster than the
//     answer): an update seen while a write is in flight is taken as ours for
//     now, and the writer has the pod checked again unless the cache then shows
//     what it wrote (writeEnds, echoWrite.recheck);
//   - a status check can run before the echo of the last write has come: it
//     compares the provider's status with a cache older than the API, and may
//     find nothing to write when the API says otherwise. Such a check is stale,
//     and the echo it missed is then checked, not taken as ours (checkStarts,
//     isEcho).
//
// It lives in the pod's podState, so the controller forgets it with the pod;
// its methods are called with the state store's lock held (stateStore.echo).
type statusEcho struct {
	// written is the fingerprint (cachedPod's statusHash) of the status last
	// written, 0 if unknown.
	written uint64
	// writing is set while a write is in flight, updatedWhileWriting once an
	// update of the pod's status came meanwhile.
	writing, updatedWhileWriting bool
	// staleCheck is set while a status check compares with a cache that may
	// not show the last write yet.
	staleCheck bool
	// pending is set from a write until its echo comes (or the cache is seen
	// to show it): only a check made meanwhile reads a cache older than the
	// API. After it, a cache that differs from written shows someone else's
	// later write, which is up to date.
	pending bool
}

// isEcho reports whether an update of the pod bringing the status whose
// fingerprint is hash is our own write coming back, with nothing to check. An
// update during a write is taken as ours; the writer decides once the write
// returns (writeEnds). The echo of a write a stale check missed is not ours to
// skip; once seen, the write's echo is no longer pending.
func (e *statusEcho) isEcho(hash uint64) bool {
	switch {
	case e.writing:
		e.updatedWhileWriting = true
		return true
	case hash == e.written:
		own := !e.staleCheck
		e.staleCheck, e.pending = false, false
		return own
	}
	return false
}

// checkStarts is said by a status check before it reads the cache: while an
// echo is pending the cache may be older than the API, so the check is stale.
// Said before the read, so that an echo coming in between counts too.
func (e *statusEcho) checkStarts() { e.staleCheck = e.staleCheck || e.pending }

// cacheRead is said by a status check once it has read a cache whose status has
// fingerprint hash: a cache showing the last write makes the check up to date.
func (e *statusEcho) cacheRead(hash uint64) {
	if hash == e.written {
		e.staleCheck = false
	}
}

// writeStarts is said before a status write is sent.
func (e *statusEcho) writeStarts() { e.writing, e.updatedWhileWriting = true, false }

// writeEnds records the end of a write of the status whose fingerprint is
// written (0 if not known, or if it failed), whose echo is now pending, and
// says what happened meanwhile.
func (e *statusEcho) writeEnds(written uint64) echoWrite {
	w := echoWrite{updated: e.updatedWhileWriting, stale: e.staleCheck}
	e.writing, e.updatedWhileWriting, e.written = false, false, written
	e.pending = written != 0
	return w
}

// shown is said once the cache is seen to show the status with fingerprint
// written: if it is still the last write, its echo is no longer pending.
func (e *statusEcho) shown(written uint64) {
	if e.written == written {
		e.pending = false
	}
}

// echoWrite is what happened to a pod while one of its status writes was in
// flight.
type echoWrite struct {
	// updated: an update of the pod's status came, taken as ours for now.
	updated bool
	// stale: the write was made by a check that read a stale cache.
	stale bool
}

// recheck reports whether the pod's status must be checked again after the
// write: an update came during it and may not have been its echo, since the
// write failed, the cache does not show it (shown), or the check was stale.
func (w echoWrite) recheck(failed, shown bool) bool {
	return w.updated && (failed || !shown || w.stale)
}
