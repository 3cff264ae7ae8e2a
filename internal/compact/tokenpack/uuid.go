package tokenpack

import "github.com/vkubelet/vkubelet/internal/compact/uuidbytes"

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
	uuidTextLen = uuidbytes.TextLen
	uuidLen     = uuidbytes.Len
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
		if i+uuidTextLen <= len(claims) && uuidbytes.Is(claims[i:i+uuidTextLen]) {
			out = append(out, uuidMark)
			out = uuidbytes.AppendBytes(out, claims[i:i+uuidTextLen])
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
		dst = uuidbytes.AppendText(dst, condensed[i+1:i+1+uuidLen])
		i += 1 + uuidLen
	}
	return dst
}
