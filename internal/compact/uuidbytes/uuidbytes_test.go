package uuidbytes

import "testing"

func TestATextGoesToBytesAndBack(t *testing.T) {
	text := []byte("0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
	if !Is(text) {
		t.Fatal("a UUID's text is not one")
	}
	b := AppendBytes(nil, text)
	if len(b) != Len || b[0] != 0x0b || b[15] != 0x5b {
		t.Fatalf("bytes % x", b)
	}
	if got := AppendText(nil, b); string(got) != string(text) {
		t.Fatalf("text back %q, want %q", got, text)
	}
}

func TestWhatWouldNotComeBackIsNoUUID(t *testing.T) {
	for _, text := range []string{
		"0B7E3F6A-1C2D-4E5F-8A9B-0C1D2E3F4A5B", // uppercase
		"0b7e3f6a_1c2d-4e5f-8a9b-0c1d2e3f4a5b", // a dash out of place
		"0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5",  // short
		"0b7e3f6a1c2d4e5f8a9b0c1d2e3f4a5b",     // no dashes
		"0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5g", // no hex
	} {
		if Is([]byte(text)) {
			t.Errorf("%q is taken for a UUID's text", text)
		}
	}
}
