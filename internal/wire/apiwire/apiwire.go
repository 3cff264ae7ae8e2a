// Package apiwire reads the API server's answers to the node's busiest
// requests without client-go's decoding of them.
//
// A node writes a pod's status and asks for its service-account token once per
// pod start. Through client-go's Request.Do each answer is read with io.ReadAll
// into a fresh buffer that grows by doubling (a status patch answers with the
// whole pod, managed fields included: about 7 KiB), and then decoded into an
// object, of which the node reads one field or two. At 10,000 pod starts those
// buffers and objects were about a sixth of the agent's allocations, and the
// garbage collector's work grows with them. The callers here send the request
// with client-go (Request.Stream: its rate limiter, retries after Retry-After,
// warnings and error decoding all apply) and read the answer into a buffer
// reused from a pool, then pick out what they need from its protobuf encoding.
package apiwire

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// maxPooled is the largest buffer returned to the pool: an answer bigger than
// this (a pod with a huge spec) is read into a buffer that is then dropped, so
// the pool never pins a few large buffers for the process's life.
const maxPooled = 64 << 10

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Read reads body to its end, closes it, and calls use with its bytes, which
// are valid only during the call: use must copy what it keeps.
func Read(body io.ReadCloser, use func(data []byte) error) error {
	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := buf.ReadFrom(body)
	if cerr := body.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = use(buf.Bytes())
	}
	if buf.Cap() <= maxPooled {
		buffers.Put(buf)
	}
	return err
}

// Field numbers in apimachinery's generated.proto.
const (
	unknownTypeMetaField    = 1 // runtime.Unknown
	unknownRawField         = 2
	unknownContentTypeField = 4 // the last of its fields
	typeMetaAPIVersionField = 1 // runtime.TypeMeta
	typeMetaKindField       = 2
)

// magic starts every protobuf-encoded object the API server sends.
const magic = "k8s\x00"

// Envelope returns the kind and the encoding of the object in a protobuf
// envelope (the magic number, then a runtime.Unknown), both parts of data; ok
// is false if data is not one (JSON, for a client configured for it) or is not
// a well-formed one. It reads the envelope as its generated decoder does: of a
// field met twice, the last wins.
func Envelope(data []byte) (kind, raw []byte, ok bool) {
	rest, found := bytes.CutPrefix(data, []byte(magic))
	if !found {
		return nil, nil, false
	}
	read, wellFormed := 0, true
	EachField(rest, func(num protowire.Number, whole []byte) bool {
		read += len(whole)
		// All four fields of a runtime.Unknown are length-delimited.
		if num >= unknownTypeMetaField && num <= unknownContentTypeField && !IsBytes(whole) {
			wellFormed = false
			return false
		}
		switch num {
		case unknownTypeMetaField:
			wellFormed = eachBytesField(Value(whole), typeMetaKindField, func(v []byte) { kind = v })
		case unknownRawField:
			raw, ok = Value(whole), true
		}
		return wellFormed
	})
	if !wellFormed || read != len(rest) {
		return nil, nil, false
	}
	return kind, raw, ok
}

// IsBytes reports whether the field whole (tag included) is length-delimited:
// the wire type of bytes, strings and messages.
func IsBytes(whole []byte) bool {
	_, typ, n := protowire.ConsumeTag(whole)
	return n > 0 && typ == protowire.BytesType
}

// eachBytesField calls fn with the value of each field num of a TypeMeta,
// msg; false if msg is not well formed or one of its fields (both strings) is
// not length-delimited.
func eachBytesField(msg []byte, num protowire.Number, fn func(v []byte)) bool {
	read, ok := 0, true
	EachField(msg, func(n protowire.Number, whole []byte) bool {
		read += len(whole)
		if n == typeMetaAPIVersionField || n == typeMetaKindField {
			if ok = IsBytes(whole); ok && n == num {
				fn(Value(whole))
			}
		}
		return ok
	})
	return ok && read == len(msg)
}

// EachField calls fn with the number and the whole encoding (tag included) of
// each top-level field of a protobuf message, in order, until fn returns false
// or a field cannot be read.
func EachField(raw []byte, fn func(num protowire.Number, whole []byte) bool) {
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return
		}
		if !fn(num, raw[:n+m]) {
			return
		}
		raw = raw[n+m:]
	}
}

// Walk is EachField for bytes from the wire: fn's error ends the walk and is
// returned, and a malformed field is an error, not the end of the message.
func Walk(raw []byte, fn func(num protowire.Number, whole []byte) error) error {
	var err error
	read := 0
	EachField(raw, func(num protowire.Number, whole []byte) bool {
		read += len(whole)
		err = fn(num, whole)
		return err == nil
	})
	if err == nil && read != len(raw) {
		err = fmt.Errorf("malformed protobuf field at byte %d of %d", read, len(raw))
	}
	return err
}

// Value is the value of a length-delimited field given whole (tag included);
// nil for a field of another wire type.
func Value(whole []byte) []byte {
	_, typ, n := protowire.ConsumeTag(whole)
	if typ != protowire.BytesType {
		return nil
	}
	v, _ := protowire.ConsumeBytes(whole[n:])
	return v
}

// Varint is the value of a varint field given whole (tag included); false for a
// field of another wire type or a malformed one.
func Varint(whole []byte) (uint64, bool) {
	_, typ, n := protowire.ConsumeTag(whole)
	if typ != protowire.VarintType {
		return 0, false
	}
	v, m := protowire.ConsumeVarint(whole[n:])
	return v, m >= 0
}

// Field is the value of the first length-delimited field num of a protobuf
// message; nil if there is none.
func Field(raw []byte, num protowire.Number) []byte {
	var v []byte
	EachField(raw, func(n protowire.Number, whole []byte) bool {
		if n != num {
			return true
		}
		v = Value(whole)
		return false
	})
	return v
}
