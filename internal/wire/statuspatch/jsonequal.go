package statuspatch

// How a pod status is written out as JSON, for Build: what compares equal
// once written, and the few JSON values it writes itself without encoding/json.

import (
	"reflect"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sameOnWire reports whether a and b, values of one type, are written out the
// same as JSON, where the strategic-merge diff compares them: times to the second
// (a provider's sub-second start time must not make a write on every sync), an
// empty list or map as none, quantities in their canonical form. It runs on
// every status sync: unlike equality.Semantic, it allocates nothing but for a
// quantity without its canonical form cached.
func sameOnWire(a, b reflect.Value) bool {
	switch a.Type() {
	case timeType:
		return sameTime(valueAt[metav1.Time](a), valueAt[metav1.Time](b))
	case microTimeType:
		ta, tb := valueAt[metav1.MicroTime](a), valueAt[metav1.MicroTime](b)
		return ta.IsZero() == tb.IsZero() && ta.Truncate(time.Microsecond).Equal(tb.Truncate(time.Microsecond))
	case quantityType:
		// String caches the canonical form in the quantity: copies, as the
		// statuses are the informer's, shared with other readers.
		qa, qb := *valueAt[resource.Quantity](a), *valueAt[resource.Quantity](b)
		return qa.String() == qb.String()
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameOnWire(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameOnWire(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameOnWire(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !sameOnWire(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	return false // no other kind is in PodStatus; were one added, it would be written
}

var (
	timeType      = reflect.TypeFor[metav1.Time]()
	microTimeType = reflect.TypeFor[metav1.MicroTime]()
	quantityType  = reflect.TypeFor[resource.Quantity]()
)

// valueAt is the T that v holds, without a copy when v is addressable.
func valueAt[T any](v reflect.Value) *T {
	if v.CanAddr() {
		return v.Addr().Interface().(*T)
	}
	t := v.Interface().(T)
	return &t
}

// same reports whether a and b are written out the same; see sameOnWire.
func same[T any](a, b *T) bool {
	return sameOnWire(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem())
}

// sameTime reports whether a and b are written out the same: null for none, else
// RFC 3339 to the second.
func sameTime(a, b *metav1.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	return a.Unix() == b.Unix()
}

// appendTime writes t as metav1.Time's MarshalJSON does.
func appendTime(b []byte, t *metav1.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

// appendJSONString writes s as a JSON string. It escapes what JSON requires and,
// as encoding/json does, turns invalid UTF-8 into U+FFFD; it need not escape
// HTML, as nothing renders the patch.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
