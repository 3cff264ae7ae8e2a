// Package uuidbytes converts between a UUID's text, as the API server writes
// UIDs (36 characters: lowercase hex in groups of 8, 4, 4, 4 and 12), and its
// 16 bytes. The packers of pods and tokens keep the bytes: S2, having no
// entropy coding, would keep the random text as it is, more than twice as
// long.
package uuidbytes

import "encoding/hex"

const (
	// TextLen is the length of a UUID's text, Len that of its bytes.
	TextLen = 36
	Len     = 16
)

// dashes are the offsets of the dashes in a UUID's text.
var dashes = [4]int{8, 13, 18, 23}

// Is reports whether text is a UUID's text as AppendText writes it: anything
// else (uppercase hex, say) would not come back byte for byte.
func Is(text []byte) bool {
	if len(text) != TextLen {
		return false
	}
	d := 0
	for i, c := range text {
		if d < len(dashes) && i == dashes[d] {
			if c != '-' {
				return false
			}
			d++
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// AppendBytes appends the 16 bytes of text, for which Is must hold.
func AppendBytes(dst, text []byte) []byte {
	var digits [2 * Len]byte
	n, start := 0, 0
	for _, d := range dashes {
		n += copy(digits[n:], text[start:d])
		start = d + 1
	}
	copy(digits[n:], text[start:])
	var b [Len]byte
	if _, err := hex.Decode(b[:], digits[:]); err != nil {
		panic("uuidbytes: no UUID's text: " + err.Error()) // the caller checked Is
	}
	return append(dst, b[:]...)
}

// AppendText appends the text of b, a UUID's 16 bytes.
func AppendText(dst, b []byte) []byte {
	var text [TextLen]byte
	hex.Encode(text[0:8], b[0:4])
	hex.Encode(text[9:13], b[4:6])
	hex.Encode(text[14:18], b[6:8])
	hex.Encode(text[19:23], b[8:10])
	hex.Encode(text[24:36], b[10:16])
	for _, d := range dashes {
		text[d] = '-'
	}
	return append(dst, text[:]...)
}
