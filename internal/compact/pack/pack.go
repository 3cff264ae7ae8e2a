// Package pack is the compression podpack and tokenpack share: S2 blocks
// (github.com/klauspost/compress/s2) against a dictionary made of a typical
// item followed by the first item the process packs that is big enough to
// teach something (and, for podpack, the few later items that packed poorly),
// with the buffers in between reused.
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

// The numbers of a Dictionaries' dictionaries.
const (
	// Static is made of the typical item alone.
	Static byte = 0
	// Learned is made of the typical item followed by the first item packed
	// within the bounds, or as First makes it. Later learned dictionaries,
	// Learned+1 up to Learned+MoreLearned, add the items that packed poorly
	// against the one before (see Compress).
	Learned byte = 1
	// MoreLearned is how many dictionaries may be learned after the first.
	MoreLearned = 2
)

// The bounds of learning a further dictionary: an item is packed poorly if
// its block is longer than poorBlock bytes, and a dictionary's source stays
// within maxSource bytes.
//
// A node's pods change shape once in their life, when their status is first
// written: the first pod, learned as it was created, teaches nothing of the
// running pods' status. A running pod of `kubectl create deployment` (1,083
// bytes) packed to 254 bytes against its first sibling as created, and to
// 129 against the dictionary that adds the sibling running; its siblings as
// created packed to 75 bytes against either. Siblings that differ in more
// than their names, UID and times pack to more: poorBlock is between the two
// (a pod of a shape unlike the first's packs to several hundred bytes).
const (
	poorBlock = 160
	maxSource = 16 << 10
)

// Dictionaries are the dictionaries of one kind of item: static, made on
// first use, and the learned ones, each set once and never changed after.
// Each holds, from its first use, a hash table of itself (32 KiB), which
// every pack reads and none writes.
type Dictionaries struct {
	name     string        // the caller's package, for its panics
	typical  func() []byte // the typical item, condensed
	min, max int           // the bounds of an item learned from
	static   func() *s2.Dict
	// learned[i] is dictionary Learned+i; newest is how many are set, each
	// stored before newest counts it.
	learned [1 + MoreLearned]atomic.Pointer[learnedDict]
	newest  atomic.Int32
	mu      sync.Mutex // held to learn
}

// learnedDict is a learned dictionary and its source, which the next one
// learned extends.
type learnedDict struct {
	dict *s2.Dict
	src  []byte
}

// NewDictionaries returns the dictionaries of the items of package name (for
// its panics), whose static one is typical's result. An item is learned from
// if its length is within minLearned and maxLearned: at least an item's worth,
// and not so long that the dictionary's hash table would miss most of it (S2
// indexes a dictionary's first 64 KiB, and a long one has the table's 32 KiB
// of slots to share).
func NewDictionaries(name string, typical func() []byte, minLearned, maxLearned int) *Dictionaries {
	d := &Dictionaries{name: name, typical: typical, min: minLearned, max: maxLearned}
	d.static = sync.OnceValue(func() *s2.Dict { return d.make(d.typical()) })
	return d
}

// make makes the S2 dictionary of src.
func (d *Dictionaries) make(src []byte) *s2.Dict {
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

// newestLearned returns the newest learned dictionary and its number, or nil.
func (d *Dictionaries) newestLearned() (byte, *learnedDict) {
	n := d.newest.Load()
	if n == 0 {
		return Static, nil
	}
	return Learned + byte(n-1), d.learned[n-1].Load() // nil only within Relearn
}

// For returns the dictionary item (condensed) is packed against, and its
// number: the newest learned one if there is one, the first made from item if
// item may teach it; the static one if not. Items packed against the static
// one stay readable for the process's life.
func (d *Dictionaries) For(item []byte) (byte, *s2.Dict) {
	if id, l := d.newestLearned(); l != nil {
		return id, l.dict
	}
	if !d.learnable(item) {
		return Static, d.static()
	}
	return Learned, d.learnFirst(item)
}

// First returns the first learned dictionary, made first if there is none:
// from item if it is within the bounds, from the typical item alone if not.
// For a caller whose packed items name no dictionary: every item is packed
// against the one the process's first item made, and none is learned after.
func (d *Dictionaries) First(item []byte) *s2.Dict {
	if l := d.learned[0].Load(); l != nil {
		return l.dict
	}
	if !d.learnable(item) {
		item = nil
	}
	return d.learnFirst(item)
}

// learnFirst sets the first learned dictionary, of the typical item followed
// by item, unless another pack's item came first, and returns the one set.
func (d *Dictionaries) learnFirst(item []byte) *s2.Dict {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.learned[0].Load(); l != nil {
		return l.dict
	}
	return d.learnLocked(0, append(slices.Clip(d.typical()), item...))
}

// learnLocked sets learned dictionary i, of src, and counts it.
func (d *Dictionaries) learnLocked(i int, src []byte) *s2.Dict {
	l := &learnedDict{dict: d.make(src), src: src}
	d.learned[i].Store(l)
	d.newest.Store(int32(i + 1))
	return l.dict
}

// Compress calls use with item compressed against the newest dictionary, an
// S2 block in a buffer of the pool, valid only during the call, and the
// dictionary's number. If item packs poorly against a learned dictionary, and
// there is room for one more, the next is learned from the newest's source
// followed by item, and item packed against it.
func (d *Dictionaries) Compress(item []byte, use func(id byte, block []byte)) {
	buf := Buffer()
	defer Release(buf)
	id, dict := d.For(item)
	*buf = dict.Encode(*buf, item)
	if id != Static && len(*buf) > poorBlock && d.learnable(item) {
		if nid, ndict := d.learnAfter(id, item); ndict != nil {
			id, *buf = nid, ndict.Encode(*buf, item)
		}
	}
	use(id, *buf)
}

// Pack returns item compressed as Compress does, in the form the callers
// keep: one byte naming the dictionary (Of), then the block.
func (d *Dictionaries) Pack(item []byte) []byte {
	var packed []byte
	d.Compress(item, func(id byte, block []byte) {
		packed = make([]byte, 1+len(block))
		packed[0] = id
		copy(packed[1:], block)
	})
	return packed
}

// learnAfter returns a dictionary newer than id to pack item against: the
// newest, if another pack learned one meanwhile, or one learned from item if
// there is room; nil if neither.
func (d *Dictionaries) learnAfter(id byte, item []byte) (byte, *s2.Dict) {
	d.mu.Lock()
	defer d.mu.Unlock()
	newest, l := d.newestLearned()
	if newest != id {
		return newest, l.dict
	}
	i := int(newest-Learned) + 1
	if i >= len(d.learned) || len(l.src)+len(item) > maxSource {
		return 0, nil
	}
	src := append(slices.Clip(l.src), item...)
	return Learned + byte(i), d.learnLocked(i, src)
}

// Of returns the dictionary numbered id, or nil: bytes this process did not
// pack may name one it does not have, and a learned one may not be made yet.
func (d *Dictionaries) Of(id byte) *s2.Dict {
	if id == Static {
		return d.static()
	}
	if i := int(id - Learned); i < len(d.learned) {
		if l := d.learned[i].Load(); l != nil {
			return l.dict
		}
	}
	return nil
}

// Relearn forgets the learned dictionaries until restore is called, for a test
// that teaches them anew: what is packed against the new ones meanwhile does
// not unpack after restore.
func (d *Dictionaries) Relearn() (restore func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var was [len(d.learned)]*learnedDict
	for i := range d.learned {
		was[i] = d.learned[i].Swap(nil)
	}
	newest := d.newest.Swap(0)
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i := range d.learned {
			d.learned[i].Store(was[i])
		}
		d.newest.Store(newest)
	}
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
