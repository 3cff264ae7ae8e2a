package podwire

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// FuzzRawPodDecode feeds a pod's encoding, as bytes from the API server, to the
// watch's pod decoder. Bytes it cannot read are an error, never a panic; and
// whatever it keeps is the pod the standard decoder reads (its metadata, and the
// pod re-read from the kept copy, managed fields aside), or, for bytes the
// standard decoder refuses, exactly the bytes sent, managed fields aside: never
// a wrong pod.
func FuzzRawPodDecode(f *testing.F) {
	p := typicalPod()
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "u1"}}
	p.Finalizers = []string{"example.com/keep"}
	for _, seed := range []*corev1.Pod{p, {}, {ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}}}} {
		raw, err := seed.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rp RawPod
		err := rp.Unmarshal(data)
		var want corev1.Pod
		wantErr := want.Unmarshal(data)
		if err != nil {
			return
		}
		if wantErr != nil {
			// Accepted where the standard decoder is not. The decoder reads the
			// metadata the informer needs and keeps the rest as it came, to be
			// read when it is needed (and so refused then, as here); it drops
			// managed fields unread. What it kept must be exactly the pod sent
			// without them: whatever is read from it later is what the API
			// server sent, never another pod.
			if stripped := withoutManagedFields(t, data); !bytes.Equal(rp.raw, stripped) {
				t.Fatalf("bytes the standard decoder refuses (%v) were kept as another pod than the one sent", wantErr)
			}
			return
		}
		if rp.Name != want.Name || rp.Namespace != want.Namespace || rp.UID != want.UID || rp.ResourceVersion != want.ResourceVersion ||
			!apiequality.Semantic.DeepEqual(rp.DeletionTimestamp, want.DeletionTimestamp) {
			t.Fatalf("metadata %s/%s %s %s, want %s/%s %s %s", rp.Namespace, rp.Name, rp.UID, rp.ResourceVersion,
				want.Namespace, want.Name, want.UID, want.ResourceVersion)
		}
		var kept corev1.Pod
		if err := kept.Unmarshal(rp.raw); err != nil {
			t.Fatalf("the kept copy does not read: %v", err)
		}
		want.ManagedFields = nil
		if !apiequality.Semantic.DeepEqual(&kept, &want) {
			t.Fatalf("the kept copy is another pod than the one sent")
		}
	})
}

// FuzzWatchEventDecode feeds a frame of the pod watch to its event decoder: a
// frame it cannot read is an error, never a panic; one it reads has the type
// and object the standard stream decoder reads.
func FuzzWatchEventDecode(f *testing.F) {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	p := typicalPod()
	p.Kind, p.APIVersion = "Pod", "v1"
	var pod strings.Builder
	if err := info.Serializer.Encode(p, &pod); err != nil {
		f.Fatal(err)
	}
	for _, ev := range []metav1.WatchEvent{
		{Type: string(watch.Added), Object: runtime.RawExtension{Raw: []byte(pod.String())}},
		{Type: string(watch.Bookmark)},
		{Type: "SOMETHING-NEW", Object: runtime.RawExtension{Raw: []byte("x")}},
	} {
		var frame strings.Builder
		if err := info.StreamSerializer.Encode(&ev, &frame); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(frame.String()))
	}
	next := info.StreamSerializer.Serializer
	f.Fuzz(func(t *testing.T, frame []byte) {
		var got metav1.WatchEvent
		_, _, err := watchEventDecoder{next}.Decode(frame, nil, &got)
		var want metav1.WatchEvent
		wantErr := want.Unmarshal(frame)
		if err != nil {
			return
		}
		if wantErr != nil {
			t.Fatalf("read a frame the standard decoder refuses (%v) as %q with %d bytes of object", wantErr, got.Type, len(got.Object.Raw))
		}
		if got.Type != want.Type || !bytes.Equal(got.Object.Raw, want.Object.Raw) {
			t.Fatalf("decoded %q with %d bytes of object, want %q with %d", got.Type, len(got.Object.Raw), want.Type, len(want.Object.Raw))
		}
	})
}

// withoutManagedFields is a pod's encoding without the managed fields of its
// metadata, made field by field with protowire alone (the test's own reading,
// not the decoder's).
func withoutManagedFields(t *testing.T, pod []byte) []byte {
	t.Helper()
	var out []byte
	eachWireField(t, pod, func(num protowire.Number, typ protowire.Type, whole, value []byte) {
		if num != 1 || typ != protowire.BytesType {
			out = append(out, whole...)
			return
		}
		meta, _ := protowire.ConsumeBytes(value)
		var kept []byte
		eachWireField(t, meta, func(num protowire.Number, _ protowire.Type, whole, _ []byte) {
			if num != 17 {
				kept = append(kept, whole...)
			}
		})
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, kept)
	})
	return out
}

// eachWireField calls fn with each field of msg: its number, wire type, whole
// encoding and value; a message that does not read field by field fails the test.
func eachWireField(t *testing.T, msg []byte, fn func(num protowire.Number, typ protowire.Type, whole, value []byte)) {
	t.Helper()
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			t.Fatalf("bytes the decoder accepted do not read field by field")
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[n:])
		if m < 0 {
			t.Fatalf("bytes the decoder accepted do not read field by field")
		}
		fn(num, typ, msg[:n+m], msg[n:n+m])
		msg = msg[n+m:]
	}
}

// FuzzRawPodListDecode feeds a list's encoding (the answer to the informer's
// list) to the pod decoder: bytes it cannot read are an error, never a panic;
// a list it reads has the items, in order, that the standard decoder reads.
func FuzzRawPodListDecode(f *testing.F) {
	for _, l := range []*corev1.PodList{
		{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{*typicalPod(), {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}},
		{},
	} {
		raw, err := l.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		f.Add(raw[:len(raw)/2])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		envelope := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Raw: data})
		b, err := envelope.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := rawPodDecoder{}.Decode(append([]byte("k8s\x00"), b...), nil, nil)
		if err != nil {
			return
		}
		got := obj.(*RawPodList)
		var want corev1.PodList
		if want.Unmarshal(data) != nil {
			return // each item's kept bytes are checked by FuzzRawPodDecode
		}
		if len(got.Items) != len(want.Items) || got.ResourceVersion != want.ResourceVersion {
			t.Fatalf("%d items at %q, want %d at %q", len(got.Items), got.ResourceVersion, len(want.Items), want.ResourceVersion)
		}
		for i := range got.Items {
			if got.Items[i].Name != want.Items[i].Name || got.Items[i].UID != want.Items[i].UID {
				t.Fatalf("item %d is %s (%s), want %s (%s)", i, got.Items[i].Name, got.Items[i].UID, want.Items[i].Name, want.Items[i].UID)
			}
		}
	})
}
