package apiwire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	authenticationv1 "k8s.io/api/authentication/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/vkubelet/vkubelet/internal/lab/wirefixtures"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// The answers of each Kubernetes release the lab runs
// (internal/wire/testdata/releases, recorded by
// `go run ./internal/lab/wirefixtures/mkwirefixtures`), read as the node
// reads them from apiwire's buffer, against client-go's decoding.

func releases(t *testing.T) []wirefixtures.Release {
	t.Helper()
	rs, err := wirefixtures.Load("../testdata/releases")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatal("no release's fixtures in ../testdata/releases: record them with go run ./internal/lab/wirefixtures/mkwirefixtures")
	}
	return rs
}

func fixture(t *testing.T, r wirefixtures.Release, file string) []byte {
	t.Helper()
	b, err := r.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readToken reads a TokenRequest answer as resolve's requestToken does: a
// protobuf envelope decoded from apiwire's buffer, JSON through the
// universal deserializer.
func readToken(data []byte) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	kind, raw, ok := apiwire.Envelope(data)
	if !ok {
		return out, runtime.DecodeInto(scheme.Codecs.UniversalDeserializer(), data, out)
	}
	if string(kind) != "TokenRequest" {
		return nil, fmt.Errorf("the API server answered a TokenRequest with a %s", kind)
	}
	return out, out.Unmarshal(raw)
}

// Each release's answer to a TokenRequest, in protobuf and in JSON, reads as
// client-go reads it, with its token and expiry; so does the answer with a
// field of a newer release in it.
func TestEachReleasesTokenAnswerReadsAsClientGoReadsIt(t *testing.T) {
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			for _, c := range []struct {
				file  string
				newer func(t *testing.T, data []byte) []byte
			}{
				{wirefixtures.TokenProtobuf, func(t *testing.T, data []byte) []byte {
					// A field in the TokenRequest's status, in the envelope.
					kind, raw, ok := apiwire.Envelope(data)
					if !ok || string(kind) != "TokenRequest" {
						t.Fatalf("%s: not a protobuf TokenRequest: %q, %v", wirefixtures.TokenProtobuf, kind, ok)
					}
					raw = appendToField(t, raw, 3, newerField())
					var out []byte
					out = append(out, data[:4]...) // the magic
					apiwire.EachField(data[4:], func(num protowire.Number, whole []byte) bool {
						if num != 2 { // runtime.Unknown's raw
							out = append(out, whole...)
							return true
						}
						out = protowire.AppendTag(out, num, protowire.BytesType)
						out = protowire.AppendBytes(out, raw)
						return true
					})
					return out
				}},
				{wirefixtures.TokenJSON, func(t *testing.T, data []byte) []byte {
					var doc map[string]any
					if err := json.Unmarshal(data, &doc); err != nil {
						t.Fatal(err)
					}
					doc["status"].(map[string]any)["fromANewerRelease"] = map[string]any{"a": 1}
					doc["fromANewerRelease"] = "x"
					b, err := json.Marshal(doc)
					if err != nil {
						t.Fatal(err)
					}
					return b
				}},
			} {
				data := fixture(t, r, c.file)
				obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
				if err != nil {
					t.Fatalf("%s: client-go: %v", c.file, err)
				}
				want := obj.(*authenticationv1.TokenRequest)
				want.TypeMeta = metav1.TypeMeta{}
				got, err := readToken(data)
				if err != nil {
					t.Fatalf("%s: %v", c.file, err)
				}
				got.TypeMeta = metav1.TypeMeta{}
				if !apiequality.Semantic.DeepEqual(got, want) {
					t.Errorf("%s: read as\n%+v\nclient-go reads\n%+v", c.file, got, want)
				}
				if got.Status.Token == "" || got.Status.ExpirationTimestamp.IsZero() || got.Spec.BoundObjectRef == nil ||
					got.Spec.BoundObjectRef.Name != r.Pod {
					t.Errorf("%s: no token, expiry or pod it is bound to in %+v", c.file, got)
				}
				newer, err := readToken(c.newer(t, data))
				if err != nil {
					t.Fatalf("%s with a field of a newer release: %v", c.file, err)
				}
				newer.TypeMeta = metav1.TypeMeta{}
				if !apiequality.Semantic.DeepEqual(newer, got) {
					t.Errorf("%s with a field of a newer release: read as\n%+v\nwant\n%+v", c.file, newer, got)
				}
			}
		})
	}
}

// Every protobuf answer of each release, and the object of each event of its
// watches, is an envelope Envelope reads, of the kind client-go decodes it
// as; JSON answers are not envelopes.
func TestEachReleasesAnswersAreEnvelopesOfTheirKind(t *testing.T) {
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			for _, e := range r.Exchanges {
				data := fixture(t, r, e.File)
				if e.ResponseContentType == runtime.ContentTypeJSON {
					if _, _, ok := apiwire.Envelope(data); ok {
						t.Errorf("%s: JSON read as an envelope", e.File)
					}
					continue
				}
				objects := [][]byte{data}
				if len(e.Events) > 0 { // length-prefixed WatchEvents
					objects = nil
					for rest := data; len(rest) > 0; {
						n := int(binary.BigEndian.Uint32(rest))
						var ev metav1.WatchEvent
						if err := ev.Unmarshal(rest[4 : 4+n]); err != nil {
							t.Fatalf("%s: %v", e.File, err)
						}
						objects = append(objects, ev.Object.Raw)
						rest = rest[4+n:]
					}
					if len(objects) != len(e.Events) {
						t.Errorf("%s: %d events, recorded %d", e.File, len(objects), len(e.Events))
					}
				}
				for _, o := range objects {
					kind, raw, ok := apiwire.Envelope(o)
					_, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(o, nil, nil)
					if err != nil || !ok || string(kind) != gvk.Kind || len(raw) == 0 {
						t.Errorf("%s: an envelope of %q (%v), client-go decodes a %v (%v)", e.File, kind, ok, gvk, err)
					}
				}
			}
		})
	}
}

// newerField is a field of a newer release: a number no release uses.
func newerField() []byte {
	b := protowire.AppendTag(nil, 4242, protowire.BytesType)
	return protowire.AppendBytes(b, []byte("a field of a newer release"))
}

// appendToField returns msg with extra appended to its message field num.
func appendToField(t *testing.T, msg []byte, num protowire.Number, extra []byte) []byte {
	t.Helper()
	var out []byte
	found := false
	apiwire.EachField(msg, func(n protowire.Number, whole []byte) bool {
		if n != num || found {
			out = append(out, whole...)
			return true
		}
		found = true
		out = protowire.AppendTag(out, n, protowire.BytesType)
		out = protowire.AppendBytes(out, append(slices.Clone(apiwire.Value(whole)), extra...))
		return true
	})
	if !found {
		t.Fatalf("no field %d", num)
	}
	if bytes.Equal(out, msg) {
		t.Fatal("nothing appended")
	}
	return out
}
