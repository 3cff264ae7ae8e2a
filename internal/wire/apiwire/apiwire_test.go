package apiwire_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

type body struct {
	io.Reader
	closed bool
	err    error
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	return b.Reader.Read(p)
}

func (b *body) Close() error { b.closed = true; return nil }

func TestReadHandsOverTheWholeBodyAndClosesIt(t *testing.T) {
	for _, size := range []int{0, 10, 7 << 10, 200 << 10} { // the last is not pooled
		want := strings.Repeat("x", size)
		b := &body{Reader: strings.NewReader(want)}
		var got string
		if err := apiwire.Read(b, func(data []byte) error { got = string(data); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want || !b.closed {
			t.Fatalf("%d bytes: read %d, closed %v", size, len(got), b.closed)
		}
	}
	// A buffer from the pool holds nothing of an earlier answer.
	var got string
	_ = apiwire.Read(&body{Reader: strings.NewReader("short")}, func(data []byte) error { got = string(data); return nil })
	if got != "short" {
		t.Fatalf("read %q", got)
	}
}

func TestReadReportsErrorsAndDoesNotUseAPartialBody(t *testing.T) {
	broken := errors.New("connection reset")
	b := &body{Reader: strings.NewReader("abc"), err: broken}
	used := false
	err := apiwire.Read(b, func([]byte) error { used = true; return nil })
	if !errors.Is(err, broken) || used || !b.closed {
		t.Fatalf("err %v, used %v, closed %v", err, used, b.closed)
	}
	mine := errors.New("not a pod")
	if err := apiwire.Read(&body{Reader: strings.NewReader("abc")}, func([]byte) error { return mine }); !errors.Is(err, mine) {
		t.Fatalf("use's error: %v", err)
	}
}

func TestEnvelopeReadsTheKindAndTheObject(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	cm := &corev1.ConfigMap{Data: map[string]string{"a": "b"}}
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	var b strings.Builder
	if err := info.Serializer.Encode(cm, &b); err != nil {
		t.Fatal(err)
	}
	kind, raw, ok := apiwire.Envelope([]byte(b.String()))
	if !ok || string(kind) != "ConfigMap" {
		t.Fatalf("kind %q, ok %v", kind, ok)
	}
	var got corev1.ConfigMap
	if err := got.Unmarshal(raw); err != nil || got.Data["a"] != "b" {
		t.Fatalf("decoded %v, %v", got.Data, err)
	}
	if _, _, ok := apiwire.Envelope([]byte(`{"kind":"ConfigMap"}`)); ok {
		t.Fatal("JSON read as a protobuf envelope")
	}
}

func TestVarintReadsAVarintFieldOnly(t *testing.T) {
	varint := protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 300)
	if v, ok := apiwire.Varint(varint); !ok || v != 300 {
		t.Errorf("Varint = %d, %v; want 300", v, ok)
	}
	bytes := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), []byte("x"))
	if _, ok := apiwire.Varint(bytes); ok {
		t.Error("a length-delimited field read as a varint")
	}
	if _, ok := apiwire.Varint(varint[:len(varint)-1]); ok {
		t.Error("a cut varint read")
	}
}

// FuzzEnvelope feeds an object's protobuf envelope, as bytes from the API
// server, to Envelope: it never panics, and what it reads is what the generated
// decoder of runtime.Unknown reads from the same bytes.
func FuzzEnvelope(f *testing.F) {
	for _, u := range []runtime.Unknown{
		{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: []byte("pod bytes")},
		{TypeMeta: runtime.TypeMeta{Kind: "PodList"}},
		{Raw: []byte{0x0a, 0x00}},
	} {
		b, err := u.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte("k8s\x00"), b...))
	}
	f.Add([]byte(`{"kind":"Pod"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		kind, raw, ok := apiwire.Envelope(data)
		if !ok {
			return
		}
		var want runtime.Unknown
		if err := want.Unmarshal(data[4:]); err != nil {
			t.Fatalf("read an envelope the generated decoder refuses: %v", err)
		}
		if string(kind) != want.Kind || !bytes.Equal(raw, want.Raw) {
			t.Fatalf("read kind %q with %d bytes, want %q with %d", kind, len(raw), want.Kind, len(want.Raw))
		}
	})
}
