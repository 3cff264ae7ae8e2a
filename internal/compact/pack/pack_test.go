package pack

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func typical() []byte { return []byte(strings.Repeat("a typical item, with what items share. ", 4)) }

// roundTrip compresses item against dict and decompresses it back.
func roundTrip(t *testing.T, d *Dictionaries, id byte, item []byte) []byte {
	t.Helper()
	var block []byte
	Compress(d.Of(id), item, func(b []byte) { block = bytes.Clone(b) })
	var got []byte
	if err := Decompress(d.Of(id), block, func(src []byte) { got = bytes.Clone(src) }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, item) {
		t.Fatalf("dictionary %d: %q came back as %q", id, item, got)
	}
	return block
}

// The first item within the bounds teaches the learned dictionary; items
// before it are packed against the static one, which stays readable.
func TestTheFirstItemWithinTheBoundsIsLearned(t *testing.T) {
	d := NewDictionaries("test", typical, 20, 100)
	short, long := []byte("short"), bytes.Repeat([]byte("x"), 101)
	first := []byte("the first item of its kind, unlike the typical one")
	sibling := []byte("the first item of its kind, unlike the typical two")
	for _, item := range [][]byte{short, long} {
		if id, _ := d.For(item); id != Static || d.Of(Learned) != nil {
			t.Fatalf("an item of %d bytes outside the bounds was packed against %d or learned", len(item), id)
		}
	}
	staticBlock := roundTrip(t, d, Static, sibling)
	if id, _ := d.For(first); id != Learned {
		t.Fatalf("the first item within the bounds was packed against %d", id)
	}
	if id, _ := d.For(short); id != Learned {
		t.Fatalf("once learned, an item was packed against %d", id)
	}
	if learned := roundTrip(t, d, Learned, sibling); len(learned) >= len(staticBlock) {
		t.Errorf("a sibling of the first item packs to %d bytes against the learned dictionary, %d against the static one", len(learned), len(staticBlock))
	}
	roundTrip(t, d, Static, short)
}

// First makes the learned dictionary of the first item, or of the typical
// item alone if the first is out of bounds, and never changes it after.
func TestFirstFixesTheLearnedDictionary(t *testing.T) {
	d := NewDictionaries("test", typical, 0, 10)
	one := d.First(bytes.Repeat([]byte("y"), 11))
	if two := d.First([]byte("small")); two != one || d.Of(Learned) != one {
		t.Fatal("the learned dictionary changed after the first item")
	}
	restore := d.Relearn()
	if d.Of(Learned) != nil {
		t.Fatal("Relearn kept the learned dictionary")
	}
	if d.First([]byte("small")) == one {
		t.Fatal("Relearn did not learn anew")
	}
	restore()
	if d.Of(Learned) != one {
		t.Fatal("restore did not put the learned dictionary back")
	}
	if d.Of(7) != nil {
		t.Fatal("an unknown dictionary number named a dictionary")
	}
}

func TestABlockThatIsNotOneIsAnError(t *testing.T) {
	d := NewDictionaries("test", typical, 0, 10)
	called := false
	if err := Decompress(d.Of(Static), []byte{0xff, 0xff, 0xff}, func([]byte) { called = true }); err == nil || called {
		t.Fatalf("a malformed block: error %v, use called %v", err, called)
	}
}

// compressed packs item with d.Compress, and checks that it comes back.
func compressed(t *testing.T, d *Dictionaries, item []byte) (byte, int) {
	t.Helper()
	var id byte
	var block []byte
	d.Compress(item, func(i byte, b []byte) { id, block = i, bytes.Clone(b) })
	var got []byte
	if err := Decompress(d.Of(id), block, func(src []byte) { got = bytes.Clone(src) }); err != nil || !bytes.Equal(got, item) {
		t.Fatalf("dictionary %d: an item of %d bytes came back as %d bytes, %v", id, len(item), len(got), err)
	}
	return id, len(block)
}

// noise is n bytes no dictionary has, the same for the same seed.
func noise(seed byte, n int) []byte {
	out := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = byte(x)
	}
	return out
}

// An item of a shape the learned dictionary lacks (a pod once it runs)
// teaches the next dictionary, against which its siblings pack small; what
// was packed before stays readable, and learning stops when there is no room.
func TestAnItemThatPacksPoorlyTeachesTheNextDictionary(t *testing.T) {
	d := NewDictionaries("test", typical, 20, 4<<10)
	created := append([]byte("created: "), noise(1, 200)...)
	running := append(slices.Clone(created), noise(2, 400)...)
	if id, _ := compressed(t, d, created); id != Learned {
		t.Fatalf("the first item was packed against %d", id)
	}
	before := d.Of(Learned)
	id, n := compressed(t, d, running)
	if id != Learned+1 || d.Of(Learned) != before {
		t.Fatalf("an item packing poorly was packed against %d, the first learned one changed: %v", id, d.Of(Learned) != before)
	}
	againstFirst := len(d.Of(Learned).Encode(nil, running))
	if n*4 > againstFirst {
		t.Errorf("the item packs to %d bytes against what it taught, %d against the first learned", n, againstFirst)
	}
	if id, n := compressed(t, d, created); id != Learned+1 || n > 16 {
		t.Errorf("an item like the first packed against %d to %d bytes", id, n)
	}
	// Each further poor item learns, while there is room.
	for i := range MoreLearned + 2 {
		id, _ := compressed(t, d, noise(byte(10+i), 300))
		want := min(Learned+1+byte(i+1), Learned+MoreLearned)
		if id != want {
			t.Fatalf("poor item %d was packed against %d, want %d", i, id, want)
		}
	}
	if d.Of(Learned+MoreLearned+1) != nil {
		t.Error("a dictionary beyond the last was made")
	}
}
