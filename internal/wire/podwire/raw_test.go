package podwire

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// Bytes that are not a whole Pod are an error, not a pod with what could be
// read: an encoding cut inside a field, at any byte. (Cut between two top-level
// fields it is a valid, smaller pod, as protobuf has it; the envelope says
// how long the pod is.)
func TestATruncatedPodIsAnError(t *testing.T) {
	p := typicalPod()
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var whole RawPod
	if err := whole.Unmarshal(raw); err != nil {
		t.Fatalf("the whole pod: %v", err)
	}
	boundary := map[int]bool{}
	at := 0
	apiwire.EachField(raw, func(_ protowire.Number, f []byte) bool {
		at += len(f)
		boundary[at] = true
		return true
	})
	for n := 1; n < len(raw); n++ {
		if boundary[n] {
			continue
		}
		var rp RawPod
		if err := rp.Unmarshal(raw[:n]); err == nil {
			t.Fatalf("the first %d of %d bytes decoded as a pod", n, len(raw))
		}
	}
}

// Anything but a Pod or a PodList is decoded as before, by the standard
// serializer.
func TestOtherKindsAreDecodedAsBefore(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	cm := &corev1.ConfigMap{Data: map[string]string{"a": "b"}}
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	var b strings.Builder
	if err := info.Serializer.Encode(cm, &b); err != nil {
		t.Fatal(err)
	}
	obj, _, err := rawPodDecoder{info.Serializer}.Decode([]byte(b.String()), nil, nil)
	if got, ok := obj.(*corev1.ConfigMap); err != nil || !ok || got.Data["a"] != "b" {
		t.Fatalf("decoded a ConfigMap as %T %v, %v", obj, obj, err)
	}
}

// The fingerprint PatchStatus reads off the API server's answer, the pod
// with its managed fields, is the one the informer's copy of that pod gets
// without them: a status write is then known for its own echo.
func TestAStatusWritesAnswerHasTheInformersFingerprint(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	encode := func(p *corev1.Pod) []byte {
		p.Kind, p.APIVersion = "Pod", "v1"
		var b strings.Builder
		if err := info.Serializer.Encode(p, &b); err != nil {
			t.Fatal(err)
		}
		return []byte(b.String())
	}
	p := typicalPod()
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "vkubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}
	p.Status.Phase = corev1.PodRunning
	answer := encode(p)
	obj, _, err := rawPodDecoder{info.Serializer}.Decode(answer, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cached := fromRaw(obj.(*RawPod))
	kind, raw, ok := apiwire.Envelope(answer)
	if !ok || string(kind) != "Pod" {
		t.Fatalf("envelope: kind %q, ok %v", kind, ok)
	}
	if got := statusFingerprint(raw); got != cached.statusHash {
		t.Fatalf("answer's status fingerprint %x, informer's %x", got, cached.statusHash)
	}
	p.Status.Phase = corev1.PodSucceeded
	_, other, _ := apiwire.Envelope(encode(p))
	if statusFingerprint(other) == cached.statusHash {
		t.Fatal("another status has the same fingerprint")
	}
}

// The pod watch's frames decode as the standard decoder has them, without
// copying their object; a cut frame is an error.
func TestWatchEventsDecodeAsBefore(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	p := typicalPod()
	p.Kind, p.APIVersion = "Pod", "v1"
	var pod strings.Builder
	if err := info.Serializer.Encode(p, &pod); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []metav1.WatchEvent{
		{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: []byte(pod.String())}},
		{Type: string(watch.Error), Object: runtime.RawExtension{Raw: []byte("a Status")}},
		{Type: "SOMETHING-NEW"},
	} {
		var frame strings.Builder
		if err := info.StreamSerializer.Encode(&ev, &frame); err != nil {
			t.Fatal(err)
		}
		var want, got metav1.WatchEvent
		if _, _, err := info.StreamSerializer.Decode([]byte(frame.String()), nil, &want); err != nil {
			t.Fatal(err)
		}
		obj, _, err := watchEventDecoder{info.StreamSerializer.Serializer}.Decode([]byte(frame.String()), nil, &got)
		if err != nil || obj != &got {
			t.Fatalf("%s: decoded %T, %v", ev.Type, obj, err)
		}
		if got.Type != want.Type || !bytes.Equal(got.Object.Raw, want.Object.Raw) {
			t.Fatalf("decoded %s with %d bytes, want %s with %d", got.Type, len(got.Object.Raw), want.Type, len(want.Object.Raw))
		}
		if len(frame.String()) > 10 {
			cut := []byte(frame.String())[:len(frame.String())-3]
			if _, _, err := (watchEventDecoder{info.StreamSerializer.Serializer}).Decode(cut, nil, &got); err == nil {
				t.Fatalf("%s: a cut frame decoded", ev.Type)
			}
		}
	}
	// Anything else goes to the standard decoder.
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := watchEventDecoder{info.StreamSerializer.Serializer}.Decode(raw, nil, &corev1.Pod{})
	if got, ok := obj.(*corev1.Pod); err != nil || !ok || got.Name != p.Name {
		t.Fatalf("a pod decoded as %T, %v", obj, err)
	}
}
