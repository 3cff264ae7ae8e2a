// Package pack is the compression podpack and tokenpack share: S2 blocks
// (github.com/klauspost/compress/s2) against a dictionary made of a typical
// item followed by the first item the process packs that is big enough to
// teach something, with the buffers in between reused.
//
// A node keeps many items of one kind for long (pods, service-account
// tokens), and most of their bytes are alike from one to the next: the
// typical item's, and more so a sibling's (a pod of the same Deployment, a
// token of the same node and ServiceAccount). S2 reads a dictionary's hash
// table in place, so one dictionary serves any number of goroutines at once.
// A dictionary is the process's own, numbered by it: packed bytes are for
// memory, never for disk or the wire.
//
// What an item is, how it is condensed before it is compressed (its UUIDs as
// bytes) and the form a packed item takes are the callers'. S2 wants 64 KiB
// of stack to compress; the callers choose whether that runs on the caller's
// goroutine or on the process's deep-stack one (internal/compact/deepstack).
package pack

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
)

// The numbers of a Dictionaries' two dictionaries.
const (
	// Static is made of the typical item alone.
	Static byte = 0
	// Learned is made of the typical item followed by the first item packed
	// within the bounds, or as First makes it.
	Learned byte = 1
)

// Dictionaries are the two dictionaries of one kind of item: static, made on
// first use, and learned, set once and never changed after. Each holds, from
// its first use, a 32 KiB hash table of itself, which every pack reads and
// none writes.
type Dictionaries struct {
	name     string        // the caller's package, for its panics
	typical  func() []byte // the typical item, condensed
	min, max int           // the bounds of an item learned from
	static   func() *s2.Dict
	learned  atomic.Pointer[s2.Dict]
}

// NewDictionaries returns the dictionaries of the items of package name (for
// its panics), whose static one is typical's result. An item is learned from
// if its length is within minLearned and maxLearned: at least an item's worth,
// and not so long that the dictionary's hash table would miss most of it (S2
// indexes a dictionary's first 64 KiB, and a long one has the table's 32 KiB
// of slots to share).
func NewDictionaries(name string, typical func() []byte, minLearned, maxLearned int) *Dictionaries {
	d := &Dictionaries{name: name, typical: typical, min: minLearned, max: maxLearned}
	d.static = sync.OnceValue(func() *s2.Dict { return d.make(nil) })
	return d
}

// make makes the S2 dictionary of the typical item followed by more.
func (d *Dictionaries) make(more []byte) *s2.Dict {
	src := append(slices.Clip(d.typical()), more...)
	// A nil search start makes the dictionary's first byte the repeat offset
	// S2 tries first; the best of all offsets saved two test pods 6 bytes of
	// 431 between them, too little to fit the dictionary to them.
	dict := s2.MakeDict(src, nil)
	if dict == nil {
		panic(fmt.Sprintf("%s: %d bytes are no S2 dictionary (%d to %d bytes)", d.name, len(src), s2.MinDictSize, s2.MaxDictSize))
	}
	return dict
}

// learnable reports whether item is within the bounds to learn from.
func (d *Dictionaries) learnable(item []byte) bool {
	return len(item) >= d.min && len(item) <= d.max
}

// For returns the dictionary item (condensed) is packed against, and its
// number: the learned one if there is one, made from item if item may teach
// it; the static one if not. Items packed against the static one stay
// readable for the process's life.
func (d *Dictionaries) For(item []byte) (byte, *s2.Dict) {
	if dict := d.learned.Load(); dict != nil {
		return Learned, dict
	}
	if !d.learnable(item) {
		return Static, d.static()
	}
	return Learned, d.learn(d.make(item))
}

// First returns the learned dictionary, made first if there is none: from
// item if it is within the bounds, from the typical item alone if not. For a
// caller whose packed items name no dictionary: every item is packed against
// the one the process's first item made.
func (d *Dictionaries) First(item []byte) *s2.Dict {
	if dict := d.learned.Load(); dict != nil {
		return dict
	}
	if !d.learnable(item) {
		item = nil
	}
	return d.learn(d.make(item))
}

// learn sets the learned dictionary to dict unless another pack's item came
// first, and returns the one set.
func (d *Dictionaries) learn(dict *s2.Dict) *s2.Dict {
	if d.learned.CompareAndSwap(nil, dict) {
		return dict
	}
	return d.learned.Load()
}

// Of returns the dictionary numbered id, or nil: bytes this process did not
// pack may name one it does not have, and the learned one may not be made yet.
func (d *Dictionaries) Of(id byte) *s2.Dict {
	switch id {
	case Static:
		return d.static()
	case Learned:
		return d.learned.Load()
	}
	return nil
}

// Relearn forgets the learned dictionary until restore is called, for a test
// that teaches one anew: what is packed against the new one meanwhile does
// not unpack after restore.
func (d *Dictionaries) Relearn() (restore func()) {
	was := d.learned.Swap(nil)
	return func() { d.learned.Store(was) }
}

// scratch holds the buffers in between: items are compressed into one before
// they are copied out at their size (a packed item is kept for long, and spare
// capacity in it would be kept with it; S2 also wants room for the worst case,
// a little more than the item), and decompressed into one before they are
// read.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// Buffer returns a buffer of the pool, of length zero; Release puts it back.
func Buffer() *[]byte {
	b := scratch.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// Release puts b back in the pool; the caller no longer uses it nor what it
// held.
func Release(b *[]byte) { scratch.Put(b) }

// Compress calls use with src compressed against dict, an S2 block in a
// buffer of the pool, valid only during the call: use copies it out.
func Compress(dict *s2.Dict, src []byte, use func(block []byte)) {
	buf := Buffer()
	defer Release(buf)
	// Encode writes from the start of its destination, not after it.
	*buf = dict.Encode(*buf, src)
	use(*buf)
}

// Decompress calls use with block decompressed against dict, in a buffer of
// the pool, valid only during the call; the error is S2's, for a block that
// is not well formed or does not fill the length it claims (use is then not
// called).
func Decompress(dict *s2.Dict, block []byte, use func(src []byte)) error {
	buf := Buffer()
	defer Release(buf)
	src, err := dict.Decode(*buf, block)
	if err != nil {
		return err
	}
	*buf = src
	use(src)
	return nil
}
