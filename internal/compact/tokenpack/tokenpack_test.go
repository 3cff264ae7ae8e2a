package tokenpack

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"unsafe"
)

// boundToken makes a token shaped like kube-apiserver's bound service-account
// tokens, with a random signature of sigLen bytes (64: ES256; 256: RS256).
func boundToken(t testing.TB, pod string, sigLen int) []byte {
	t.Helper()
	return nodeToken(t, pod, uuid(t), uuid(t), sigLen)
}

// nodeToken is boundToken for a node of UID nodeUID and a pod of the
// ServiceAccount of UID saUID.
func nodeToken(t testing.TB, pod, nodeUID, saUID string, sigLen int) []byte {
	t.Helper()
	header := `{"alg":"ES256","kid":"RLM1GoikbAetyF4eUbJ6CV9HX1zKWBOPjxuzFjwwfIQ"}`
	claims := fmt.Sprintf(`{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":1795669030,"iat":1795665430,`+
		`"iss":"https://kubernetes.default.svc.cluster.local","jti":"%s","kubernetes.io":{"namespace":"shop",`+
		`"node":{"name":"vk-7","uid":"%s"},"pod":{"name":"%s","uid":"%s"},"serviceaccount":{"name":"default","uid":"%s"},`+
		`"warnafter":1795669037},"nbf":1795665430,"sub":"system:serviceaccount:shop:default"}`,
		uuid(t), nodeUID, pod, uuid(t), saUID)
	sig := make([]byte, sigLen)
	if _, err := rand.Read(sig); err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	return []byte(enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims)) + "." + enc.EncodeToString(sig))
}

func uuid(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func TestABoundTokenIsKeptInAThirdAndRebuiltExactly(t *testing.T) {
	for _, sigLen := range []int{64, 256, 512} {
		tok := boundToken(t, "web-7d9c8b5f4-x2kq9", sigLen)
		p := Pack(tok)
		if got := p.Bytes(); !bytes.Equal(got, tok) {
			t.Fatalf("signature of %d bytes: Bytes() = %q, want %q", sigLen, got, tok)
		}
		// The signature is kept as bytes, the claims compressed, the header
		// shared: what is left is the signature and about 250 bytes, mostly
		// the four UUIDs and four times.
		if max := sigLen + 260; p.Size() > max {
			t.Errorf("signature of %d bytes: a token of %d bytes is kept in %d, want at most %d", sigLen, len(tok), p.Size(), max)
		}
		t.Logf("signature of %d bytes: %d bytes kept in %d", sigLen, len(tok), p.Size())
	}
}

func TestTokensOfOneIssuerShareTheirHeader(t *testing.T) {
	a, b := Pack(boundToken(t, "a", 64)), Pack(boundToken(t, "b", 64))
	if a.header != b.header {
		t.Fatal("two tokens with the same header keep it twice")
	}
}

func TestWhatCannotBeRebuiltIsKeptAsGiven(t *testing.T) {
	tok := boundToken(t, "a", 64)
	h, c, s := bytes.Split(tok, []byte{'.'})[0], bytes.Split(tok, []byte{'.'})[1], bytes.Split(tok, []byte{'.'})[2]
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, []byte{'.'}) }
	for name, in := range map[string][]byte{
		"empty":                 {},
		"opaque token":          []byte("s3cr3t-static-token"),
		"two segments":          join(h, c),
		"four segments":         join(h, c, s, s),
		"empty header":          join(nil, c, s),
		"padded signature":      append(join(h, c, s), '='),
		"newline in the claims": join(h, append(append(append([]byte(nil), c[:10]...), '\n'), c[10:]...), s),
		"standard alphabet":     join(h, c, append([]byte("+/"), s[2:]...)),
		"stray bits at the end": join(h, c, append(append([]byte(nil), s[:len(s)-1]...), strayLast(s[len(s)-1]))),
		"impossible length":     join(h, c, append(append([]byte(nil), s...), 'A', 'A', 'A')), // 89 characters
	} {
		p := Pack(in)
		got := p.Bytes()
		if !bytes.Equal(got, in) {
			t.Errorf("%s: Bytes() = %q, want %q", name, got, in)
		}
		if len(in) > 0 && &got[0] != &in[0] {
			t.Errorf("%s: kept as a copy, not as given", name)
		}
	}
}

// strayLast is the base64url character after c, which for the last character
// of a 64-byte signature (86 characters, 4 bits of it unused) sets an unused
// bit when c has none set.
func strayLast(c byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return alphabet[(bytes.IndexByte([]byte(alphabet), c)+1)%64]
}

func TestPacksFromManyGoroutinesAtOnce(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				tok := boundToken(t, fmt.Sprintf("p-%d-%d", i, j), 64)
				if got := Pack(tok).Bytes(); !bytes.Equal(got, tok) {
					t.Errorf("Bytes() = %q, want %q", got, tok)
				}
			}
		}()
	}
	wg.Wait()
}

func TestTheZeroTokenIsEmpty(t *testing.T) {
	if got := (Token{}).Bytes(); len(got) != 0 {
		t.Fatalf("Bytes() = %q", got)
	}
}

func FuzzPack(f *testing.F) {
	f.Add(boundToken(f, "web", 64))
	f.Add([]byte("a.b.c"))
	f.Add([]byte("eyJ.e30.AA"))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if got := Pack(in).Bytes(); !bytes.Equal(got, in) {
			t.Fatalf("Bytes() = %q, want %q", got, in)
		}
	})
}

// BenchmarkPack packs tokens it did not pack recently (4 × recentSlots in
// turn), as a node does when they are issued.
func BenchmarkPack(b *testing.B) {
	toks := make([][]byte, 4*recentSlots)
	for i := range toks {
		toks[i] = boundToken(b, fmt.Sprintf("web-7d9c8b5f4-%d", i), 64)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		Pack(toks[i%len(toks)])
		i++
	}
}

// BenchmarkPackAgain packs a token packed just before, as a provider that
// keeps its files does.
func BenchmarkPackAgain(b *testing.B) {
	tok := boundToken(b, "web-7d9c8b5f4-x2kq9", 64)
	Pack(tok)
	b.ReportAllocs()
	for b.Loop() {
		Pack(tok)
	}
}

func BenchmarkBytes(b *testing.B) {
	p := Pack(boundToken(b, "web-7d9c8b5f4-x2kq9", 64))
	b.ReportAllocs()
	for b.Loop() {
		p.Bytes()
	}
}

func TestATokenPackedTwiceIsKeptOnce(t *testing.T) {
	tok := boundToken(t, "twice", 64)
	first := Pack(tok)
	// The provider packs the copy it was handed, not the resolver's bytes.
	second := Pack(append([]byte(nil), tok...))
	if unsafe.StringData(first.body) != unsafe.StringData(second.body) {
		t.Fatal("the second pack of a token made a second copy")
	}
}

func TestARememberedTokenOfTheSameHashButOtherBytesIsNotGiven(t *testing.T) {
	tok, other := boundToken(t, "mine", 64), boundToken(t, "other", 64)
	// As if the two hashes collided: the slot of tok's hash holds other.
	recent.put(maphash.Bytes(recent.seed, tok), Pack(other))
	if got := Pack(tok).Bytes(); !bytes.Equal(got, tok) {
		t.Fatalf("Bytes() = %q, want %q", got, tok)
	}
}

// The dictionary learns from the process's first token what a node's tokens
// share (its UID, the ServiceAccount's), and keeps the rest smaller.
func TestTokensOfOneNodePackSmallerThanTheFirst(t *testing.T) {
	// The test makes the dictionary anew; it puts the process's back, and
	// forgets the tokens it packed, which only the test's dictionary reads.
	restore := dicts.Relearn()
	t.Cleanup(func() {
		recent.mu.Lock()
		recent.slots = [recentSlots]recentToken{}
		recent.mu.Unlock()
		restore()
	})
	node, sa := uuid(t), uuid(t)
	first := Pack(nodeToken(t, "web-1", node, sa, 64))
	againstSkeleton := Pack(boundToken(t, "web-2", 64))
	sibling := nodeToken(t, "web-3", node, sa, 64)
	p := Pack(sibling)
	if !bytes.Equal(p.Bytes(), sibling) {
		t.Fatal("a token packed against the learned dictionary does not rebuild")
	}
	t.Logf("first %d bytes, a token of another node %d, one of the first's node %d", first.Size(), againstSkeleton.Size(), p.Size())
	// Two UUIDs the first token had: each 17 bytes condensed (uuid.go) against
	// a copy of a few.
	if p.Size()+24 > againstSkeleton.Size() {
		t.Errorf("a token of the first's node and ServiceAccount is kept in %d bytes, one of another in %d: want 24 less at least (two UUIDs)", p.Size(), againstSkeleton.Size())
	}
}

func TestUUIDsAreKeptAsTheirBytesAndWrittenBackAsTheyWere(t *testing.T) {
	for _, claims := range []string{
		`{"jti":"0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b","x":"0B7E3F6A-1C2D-4E5F-8A9B-0C1D2E3F4A5B"}`, // uppercase: kept as text
		`0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5`,                   // one whole, one cut short
		`{"a":"0b7e3f6a_1c2d-4e5f-8a9b-0c1d2e3f4a5b"}`,                                              // a dash out of place
		`{"uid":"00000000-0000-0000-0000-000000000000"}`,                                            // zero bytes after the mark
		``,
	} {
		c, ok := condense([]byte(claims))
		if !ok {
			t.Fatalf("%q: not condensed", claims)
		}
		if got := expand(nil, c); string(got) != claims || expandedLen(c) != len(claims) {
			t.Errorf("%q: expanded to %q (length %d)", claims, got, expandedLen(c))
		}
	}
	c, _ := condense([]byte(`{"jti":"0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}`))
	if want := len(`{"jti":""}`) + 1 + uuidLen; len(c) != want {
		t.Errorf("a UUID condensed to %d bytes of claims, want %d", len(c), want)
	}
	if _, ok := condense([]byte("{\"a\":\"\x00\"}")); ok {
		t.Error("claims holding a NUL byte were condensed")
	}
}

func FuzzCondense(f *testing.F) {
	f.Add([]byte(`{"jti":"0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}`))
	f.Add([]byte("0b7e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, ok := condense(in)
		if !ok {
			if !bytes.Contains(in, []byte{uuidMark}) {
				t.Fatalf("%q: not condensed", in)
			}
			return
		}
		if got := expand(nil, c); !bytes.Equal(got, in) || expandedLen(c) != len(in) {
			t.Fatalf("%q: expanded to %q", in, got)
		}
	})
}
