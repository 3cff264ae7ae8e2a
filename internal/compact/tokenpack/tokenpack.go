// Package tokenpack keeps service-account tokens in memory in fewer bytes.
//
// A node holds the bound token of every pod that mounts one (every Deployment's
// pod does, by default) for as long as the token serves: the resolver, to hand
// it out again when the pod's volumes are resolved anew, and a provider that
// keeps its pods' files (the mock, for exec), to show it. A token is a JSON Web
// Token in compact serialization: three base64url segments, header, claims and
// signature, joined by dots. The project's control plane issues ES256 tokens of
// about 800 bytes; RSA keys, the usual ones elsewhere, make them about 1,100.
//
// Most of those bytes are alike from one token to the next. The tokens of one
// API server share their header. The claims are JSON whose keys, issuer,
// audience, namespace and service account recur; what is the token's own is a
// few names, four UIDs and four times. Only the signature is as random as its
// bytes, which base64 writes in a third more. So a Token keeps the header
// interned (one copy per distinct header in the process), the claims decoded,
// with their UUIDs as bytes (uuid.go), and compressed with S2 against a
// dictionary made of a typical bound token's claims and those of the first
// token the process packs, and the signature decoded: a token of about 900
// bytes from the project's control plane is kept in about 135 when it shares
// the first token's node and ServiceAccount, 170 when not.
//
// Bytes rebuilds the token byte for byte. Pack checks that it does and keeps
// anything it cannot rebuild exactly as it was given: a token that is no JWT,
// or whose base64 is not the one this package writes back.
//
// A token is often packed twice: by the resolver when it is issued, and a
// moment later by a provider that keeps its pods' files (the mock), from the
// copy it was handed. Pack remembers the tokens it packed last (recent) and
// gives the second the first's packed bytes, so the two share one copy.
package tokenpack

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"unique"
	"unsafe"

	"github.com/klauspost/compress/s2"

	"github.com/vkubelet/vkubelet/internal/compact/deepstack"
	"github.com/vkubelet/vkubelet/internal/compact/pack"
)

// Token is a token kept packed. The zero Token is the empty one.
type Token struct {
	// header is the token's first segment, as given; zero when body is the
	// whole token as given.
	header unique.Handle[string]
	// body is the signature's length (uvarint), the signature, and the claims'
	// JSON compressed with S2 against dict; or the token as given. It is held
	// in a string (never written, as a string is) for its 8 bytes fewer than a
	// slice's: a Token is kept per pod, by the resolver and by providers.
	body string
}

// asBody holds b in a Token's body without copying it: b is never written
// after (packed bytes are the package's own, a token kept as given is the
// caller's, read-only).
func asBody(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// bodyBytes is the body as the slice it was made from: read-only.
func (t Token) bodyBytes() []byte { return unsafe.Slice(unsafe.StringData(t.body), len(t.body)) }

// b64 is the base64 of JWTs: URL alphabet, no padding. Strict decoding refuses
// stray bits in the last character, so that a decoded segment encodes back to
// the same text.
var (
	b64       = base64.RawURLEncoding
	b64Strict = base64.RawURLEncoding.Strict()
)

// claimsSkeleton is a bound service-account token's claims as kube-apiserver
// writes them (keys sorted, no spaces), with placeholder values: the start of
// the dictionary the claims are compressed against (dict).
const claimsSkeleton = `{"aud":["https://kubernetes.default.svc.cluster.local"],` +
	`"exp":1700000000,"iat":1700000000,"iss":"https://kubernetes.default.svc.cluster.local",` +
	`"jti":"00000000-0000-0000-0000-000000000000","kubernetes.io":{"namespace":"default",` +
	`"node":{"name":"node","uid":"00000000-0000-0000-0000-000000000000"},` +
	`"pod":{"name":"pod","uid":"00000000-0000-0000-0000-000000000000"},` +
	`"serviceaccount":{"name":"default","uid":"00000000-0000-0000-0000-000000000000"},` +
	`"warnafter":1700000000},"nbf":1700000000,"sub":"system:serviceaccount:default:default"}`

// dicts holds the S2 dictionary the claims are compressed against: the
// learned one (internal/compact/pack), made by the process's first pack
// (Dictionaries.First) and never changed after: every token the process packed
// was compressed against it, and is decompressed against it. Its hash table
// (32 KiB, built on the first pack) is read by every pack, written by none.
//
// It is made of claimsSkeleton followed by the claims being packed (at most
// maxLearned bytes), both condensed. A node's tokens share much more than the
// skeleton's keys: one issuer and audience, the node's name and UID, and for
// most pods one namespace and the UID of its default ServiceAccount. A token
// that shares the first's node and ServiceAccount is kept in about 35 bytes
// less than against the skeleton alone
// (TestTokensOfOneNodePackSmallerThanTheFirst: 134 against 168, the UUIDs
// condensed; 169 against 242 before); a token unlike the first compresses as
// it would against the skeleton, which comes first (and the nearest matches,
// last, are the likeliest ones).
var dicts = pack.NewDictionaries("tokenpack", condensedSkeleton, 0, maxLearned)

// maxLearned bounds the first token's claims that join the dictionary.
const maxLearned = 4 << 10

// condensedSkeleton is claimsSkeleton condensed.
func condensedSkeleton() []byte {
	src, _ := condense([]byte(claimsSkeleton))
	return src
}

// maxClaims bounds the claims this package compresses: S2 refers to the
// dictionary only from the first 64 KiB of a block, and no token comes near.
// Longer ones are kept as given.
const maxClaims = s2.MaxDictSrcOffset

// Pack returns token packed. A token it cannot rebuild byte for byte is kept as
// given, not copied: the caller must not change token afterwards, as it must
// not change a file handed to a provider.
//
// The compression runs on the process's aside goroutine (internal/compact/deepstack): S2
// wants 64 KiB of stack, and Pack is called on short-lived goroutines.
func Pack(token []byte) Token {
	header, claims64, sig64, ok := split(token)
	if !ok {
		return Token{body: asBody(token)}
	}
	hash := maphash.Bytes(recent.seed, token)
	if t, ok := recent.get(hash); ok && t.is(token) {
		return t
	}
	claims, err := b64Strict.DecodeString(string(claims64))
	if err != nil || len(claims) > maxClaims {
		return Token{body: asBody(token)}
	}
	sigLen := b64.DecodedLen(len(sig64))
	var body []byte
	condensed, ok := condense(claims)
	if !ok {
		return Token{body: asBody(token)}
	}
	deepstack.Do(func() {
		pack.Compress(dicts.First(condensed), condensed, func(block []byte) {
			var length [binary.MaxVarintLen64]byte
			k := binary.PutUvarint(length[:], uint64(sigLen))
			body = make([]byte, 0, k+sigLen+len(block)) // kept for long: no spare room
			body = append(body, length[:k]...)
			body, err = b64Strict.AppendDecode(body, sig64)
			body = append(body, block...)
		})
	})
	if err != nil {
		return Token{body: asBody(token)}
	}
	packed := Token{header: unique.Make(string(header)), body: asBody(body)}
	if !packed.is(token) {
		return Token{body: asBody(token)}
	}
	recent.put(hash, packed)
	return packed
}

// recentSlots is how many tokens recent remembers at most. The second pack of a
// token comes within the same pod sync as the first, while the node's other
// syncs (200 workers by default) pack a few more each.
const recentSlots = 1024

// recent remembers the last tokens packed.
var recent = &recentTokens{seed: maphash.MakeSeed()}

// recentTokens remembers tokens by a hash of their bytes: a direct-mapped
// table, each slot holding the last token whose hash falls in it. It keeps up
// to recentSlots packed tokens alive (about 300 KiB at most).
type recentTokens struct {
	seed  maphash.Seed
	mu    sync.Mutex
	slots [recentSlots]recentToken
}

type recentToken struct {
	hash  uint64
	token Token
}

// get returns the token remembered for hash, if any: the caller checks that it
// is the one it has, as hashes may collide.
func (r *recentTokens) get(hash uint64) (Token, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := r.slots[hash%recentSlots]
	return slot.token, slot.hash == hash && slot.token.Packed()
}

// put remembers t, packed from bytes of this hash.
func (r *recentTokens) put(hash uint64, t Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots[hash%recentSlots] = recentToken{hash: hash, token: t}
}

// split cuts a compact JWT into its three segments, each of base64url's
// characters only (the decoder would skip newlines; Bytes would not write them
// back).
func split(token []byte) (header, claims, sig []byte, ok bool) {
	header, rest, ok1 := bytes.Cut(token, []byte{'.'})
	claims, sig, ok2 := bytes.Cut(rest, []byte{'.'})
	if !ok1 || !ok2 || len(header) == 0 || len(claims) == 0 {
		return nil, nil, nil, false
	}
	for _, seg := range [][]byte{header, claims, sig} {
		for _, c := range seg {
			if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return nil, nil, nil, false
			}
		}
	}
	return header, claims, sig, true
}

// Bytes returns the token as it was packed: a new slice for a packed token, the
// one given for a token kept as given (read-only, like the one Pack was given).
func (t Token) Bytes() []byte {
	if !t.Packed() {
		return t.bodyBytes()
	}
	return t.appendTo(nil)
}

// is reports whether t rebuilds as token, rebuilding it in a reused buffer:
// Pack checks each token it packs, and the copy would be garbage at once.
func (t Token) is(token []byte) bool {
	if !t.Packed() {
		return t.body == string(token)
	}
	buf := pack.Buffer()
	defer pack.Release(buf)
	*buf = t.appendTo(*buf)
	return bytes.Equal(*buf, token)
}

// appendTo appends the packed token t, rebuilt, to out.
func (t Token) appendTo(out []byte) []byte {
	body := t.bodyBytes()
	sigLen, n := binary.Uvarint(body)
	sig, block := body[n:n+int(sigLen)], body[n+int(sigLen):]
	expanded := pack.Buffer()
	defer pack.Release(expanded)
	// A packed token exists only once the dictionary does.
	err := pack.Decompress(dicts.Of(pack.Learned), block, func(condensed []byte) {
		*expanded = expand(*expanded, condensed)
	})
	if err != nil {
		// Pack rebuilt the token from these bytes before it kept them.
		panic(fmt.Sprintf("tokenpack: a packed token does not unpack: %v", err))
	}
	claims := *expanded
	header := t.header.Value()
	out = slices.Grow(out, len(header)+2+b64.EncodedLen(len(claims))+b64.EncodedLen(len(sig)))
	out = append(out, header...)
	out = append(out, '.')
	out = b64.AppendEncode(out, claims)
	out = append(out, '.')
	return b64.AppendEncode(out, sig)
}

// Packed reports whether Pack packed the token, rather than keep what it was
// given as given (no JWT, or one Pack cannot rebuild byte for byte).
func (t Token) Packed() bool { return t.header != (unique.Handle[string]{}) }

// Size is how many bytes t keeps of its own, the shared header not counted.
func (t Token) Size() int {
	return len(t.body)
}
