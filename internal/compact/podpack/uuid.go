package podpack

import (
	"bytes"
	"errors"

	"github.com/vkubelet/vkubelet/internal/compact/uuidbytes"
)

// A pod's UID is its own and random: 36 characters of text that S2 keeps as
// they are, the largest part of what a pod packs to against a sibling. So an
// encoding is condensed before it is compressed: each UUID written as a
// protobuf string (its length, 36, then its text) becomes uuidEscape,
// uuidFollows and the UUID's 16 bytes, 18 bytes for 37. A uuidEscape byte of
// the encoding itself becomes uuidEscape, literalEscape. The escape is a byte
// rare in pods' encodings, which are mostly text, small tags and lengths: it
// appears only in some varints (a timestamp's seconds, say).
const (
	uuidEscape    = 0xff
	literalEscape = 0x00
	uuidFollows   = 0x01
	uuidField     = 1 + uuidbytes.TextLen // the length byte, then the text
)

// condense appends raw condensed to dst.
func condense(dst, raw []byte) []byte {
	// esc is the offset in raw of its next escape byte (-1: none left), found
	// once and moved with raw, rather than searched for again at every length
	// byte of 36 before it.
	esc := bytes.IndexByte(raw, uuidEscape)
	advance := func(n int) {
		raw = raw[n:]
		if esc >= 0 {
			esc -= n
		}
	}
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, uuidbytes.TextLen)
		if esc >= 0 && (i < 0 || esc < i) {
			dst = append(dst, raw[:esc]...)
			dst = append(dst, uuidEscape, literalEscape)
			raw = raw[esc+1:]
			esc = bytes.IndexByte(raw, uuidEscape)
			continue
		}
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		if len(raw)-i >= uuidField && uuidbytes.Is(raw[i+1:i+uuidField]) {
			dst = append(dst, uuidEscape, uuidFollows)
			dst = uuidbytes.AppendBytes(dst, raw[i+1:i+uuidField])
			advance(i + uuidField)
			continue
		}
		dst = append(dst, raw[i])
		advance(i + 1)
	}
	return dst
}

var errBadEscape = errors.New("a condensed encoding's escape is cut short or unknown")

// expand appends to dst the encoding condensed is of. Bytes this process did
// not condense may hold an escape it does not know, or one cut short: an
// error.
func expand(dst, condensed []byte) ([]byte, error) {
	for len(condensed) > 0 {
		j := bytes.IndexByte(condensed, uuidEscape)
		if j < 0 {
			return append(dst, condensed...), nil
		}
		dst = append(dst, condensed[:j]...)
		rest := condensed[j+1:]
		switch {
		case len(rest) >= 1 && rest[0] == literalEscape:
			dst = append(dst, uuidEscape)
			condensed = rest[1:]
		case len(rest) >= 1+uuidbytes.Len && rest[0] == uuidFollows:
			dst = append(dst, uuidbytes.TextLen)
			dst = uuidbytes.AppendText(dst, rest[1:1+uuidbytes.Len])
			condensed = rest[1+uuidbytes.Len:]
		default:
			return nil, errBadEscape
		}
	}
	return dst, nil
}
