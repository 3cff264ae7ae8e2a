package podwire

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// BenchmarkCachedPod is what the pod cache costs per pod event and per sync: the
// informer's transform encodes the pod, a handler decodes it. It reports the
// encoded size, which is what the cache keeps per pod.
func BenchmarkCachedPod(b *testing.B) {
	p := typicalPod()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		cp, err := Compact(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cp.Decode(); err != nil {
			b.Fatal(err)
		}
		size = len(cp.packed)
	}
	b.ReportMetric(float64(size), "packed-bytes")
}

// BenchmarkPodFromTheWatch is what each pod of the watch costs until it is
// cached: decoded by client-go's protobuf serializer and encoded again by
// Compact (the typed client's path), or read encoded (Client).
func BenchmarkPodFromTheWatch(b *testing.B) {
	p := typicalPod()
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"1\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:resources":{".":{},"f:limits":{},"f:requests":{}}}}}}`)}}}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", HostIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"} // as the API server encodes it
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	var wire bytes.Buffer
	if err := info.Serializer.Encode(p, &wire); err != nil {
		b.Fatal(err)
	}
	decoder := scheme.Codecs.WithoutConversion().DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj, err := runtime.Decode(decoder, wire.Bytes())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := transform(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) {
		raw := rawPodDecoder{info.Serializer}
		b.ReportAllocs()
		for b.Loop() {
			obj, _, err := raw.Decode(wire.Bytes(), nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := transform(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStatusWrite is a status write's round trip, against an HTTP/2
// server answering as the API server does (the whole pod, managed fields
// included), as PatchStatus sent it before (client-go's Request.Do: the answer
// read by io.ReadAll, then decoded as a RawPod) and as it does now (Stream: the
// answer read into a reused buffer, the fingerprint taken off its encoding).
func BenchmarkStatusWrite(b *testing.B) {
	p := typicalPod()
	for _, m := range []string{"kube-controller-manager", "kube-scheduler", "vkubelet"} {
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: bytes.Repeat([]byte(`{"f:status":{"f:conditions":{}}}`), 30)}})
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", HostIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	var answer bytes.Buffer
	if err := info.Serializer.Encode(p, &answer); err != nil {
		b.Fatal(err)
	}
	client := testenv.AnsweringClient(b, http.StatusOK, answer.Bytes())
	rp, ok := NewClient(client)
	if !ok {
		b.Fatal("no REST client")
	}
	patch := []byte(`{"status":{"phase":"Running"}}`)
	ctx := context.Background()
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		defer b.ReportMetric(float64(answer.Len()), "answer-bytes")
		for b.Loop() {
			var written RawPod
			err := rp.rest.Patch(types.StrategicMergePatchType).Namespace("ns").Resource("pods").
				Name("bench").SubResource("status").Body(patch).Do(ctx).Into(&written)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = fingerprints(written.raw)
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		defer b.ReportMetric(float64(answer.Len()), "answer-bytes")
		for b.Loop() {
			if _, err := rp.PatchStatus(ctx, "ns", "bench", patch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWithStatus is what each status check decodes of the cached pod: its
// status and, walking the spec's fields, its readiness gates.
func BenchmarkWithStatus(b *testing.B) {
	cp, err := Compact(typicalPod())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cp.WithStatus(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResourcesSpec: what a status check of a provider that resizes in
// place adds, reading the containers' resources from the cached pod.
func BenchmarkResourcesSpec(b *testing.B) {
	cp, err := Compact(typicalPod())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cp.ResourcesSpec(); err != nil {
			b.Fatal(err)
		}
	}
}
