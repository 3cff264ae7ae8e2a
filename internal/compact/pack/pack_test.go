package pack

import (
	"bytes"
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
