package tokenpack

import "encoding/hex"

// A bound token's claims hold four UUIDs (the token's own, the pod's, the
// node's and the ServiceAccount's), each written as 36 characters of lowercase
// hex and dashes. Two are new in every token and as random as their 16 bytes,
// which S2, having no entropy coding, keeps as the 36 characters. So the claims
// are condensed before they are compressed: each UUID becomes uuidMark followed
// by its 16 bytes. No JSON text holds a NUL byte (a string writes it \u0000),
// so a mark stands for nothing else; claims that hold one are not condensed,
// and Pack keeps their token as given.
const (
	uuidMark    = 0x00
	uuidTextLen = 36
	uuidLen     = 16
)

// condense returns claims with each lowercase UUID replaced by uuidMark and
// its bytes, or false if claims hold a NUL byte.
func condense(claims []byte) ([]byte, bool) {
	out := make([]byte, 0, len(claims))
	for i := 0; i < len(claims); {
		c := claims[i]
		if c == uuidMark {
			return nil, false
		}
		if i+uuidTextLen <= len(claims) && isUUID(claims[i:i+uuidTextLen]) {
			out = append(out, uuidMark)
			out = appendUUIDBytes(out, claims[i:i+uuidTextLen])
			i += uuidTextLen
			continue
		}
		out = append(out, c)
		i++
	}
	return out, true
}

// expandedLen is the length of condensed once expanded.
func expandedLen(condensed []byte) int {
	n := 0
	for i := 0; i < len(condensed); {
		if condensed[i] == uuidMark {
			n += uuidTextLen
			i += 1 + uuidLen
			continue
		}
		n++
		i++
	}
	return n
}

// expand appends to dst the claims that condense made condensed of. It panics
// on a mark cut short, which only bytes not made by condense can hold.
func expand(dst, condensed []byte) []byte {
	for i := 0; i < len(condensed); {
		if condensed[i] != uuidMark {
			// Copy up to the next mark at once.
			j := i + 1
			for j < len(condensed) && condensed[j] != uuidMark {
				j++
			}
			dst = append(dst, condensed[i:j]...)
			i = j
			continue
		}
		if i+1+uuidLen > len(condensed) {
			panic("tokenpack: condensed claims end inside a UUID")
		}
		dst = appendUUIDText(dst, condensed[i+1:i+1+uuidLen])
		i += 1 + uuidLen
	}
	return dst
}

// dashes are the offsets of the dashes in a UUID's text (8-4-4-4-12).
var dashes = [4]int{8, 13, 18, 23}

// isUUID reports whether text is a UUID written as expand writes it back:
// lowercase hex in groups of 8, 4, 4, 4 and 12.
func isUUID(text []byte) bool {
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

// appendUUIDBytes appends the 16 bytes of text, a UUID (isUUID).
func appendUUIDBytes(dst, text []byte) []byte {
	var digits [2 * uuidLen]byte
	n, start := 0, 0
	for _, d := range dashes {
		n += copy(digits[n:], text[start:d])
		start = d + 1
	}
	copy(digits[n:], text[start:])
	var b [uuidLen]byte
	if _, err := hex.Decode(b[:], digits[:]); err != nil {
		panic("tokenpack: a UUID's text is no hex: " + err.Error()) // isUUID said it was
	}
	return append(dst, b[:]...)
}

// appendUUIDText appends b, a UUID's 16 bytes, as text.
func appendUUIDText(dst, b []byte) []byte {
	var text [uuidTextLen]byte
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
