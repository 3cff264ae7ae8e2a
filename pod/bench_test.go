package pod

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// benchPod is a pod of realistic size: three containers with resources, labels,
// annotations and the tolerations admission adds.
func benchPod() *corev1.Pod {
	p := newPod("bench")
	p.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z", "prometheus.io/scrape": "true"}
	p.Labels["pod-template-hash"] = "5fc9f4bf66"
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	p.Spec.Containers = []corev1.Container{
		{Name: "app", Image: "registry.example/app:1.2.3", Resources: res},
		{Name: "sidecar", Image: "registry.example/proxy:4.5", Resources: res},
		{Name: "logs", Image: "registry.example/logs:7", Resources: res},
	}
	return p
}

// BenchmarkUpdatableEqual is the check every sync of an unchanged pod makes.
func BenchmarkUpdatableEqual(b *testing.B) {
	a, c := updatableOf(benchPod()), updatableOf(benchPod())
	b.ReportAllocs()
	for b.Loop() {
		if !a.equal(c) {
			b.Fatal("equal pods compared unequal")
		}
	}
}

// BenchmarkStatusUnchanged is the status sync of a pod whose status did not change:
// it must stop before building any JSON.
func BenchmarkStatusUnchanged(b *testing.B) {
	p := benchPod()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	same := p.Status.DeepCopy()
	b.ReportAllocs()
	for b.Loop() {
		desired := mergeStatus(p.Status, same, statusSpec{})
		if patch, _ := statusPatch(p.UID, &p.Status, &desired); patch != nil {
			b.Fatal("patch for an unchanged status")
		}
	}
}

// BenchmarkCachedPod is what the pod cache costs per pod event and per sync: the
// informer's transform encodes the pod, a handler decodes it. It reports the
// encoded size, which is what the cache keeps per pod.
func BenchmarkCachedPod(b *testing.B) {
	p := benchPod()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		cp, err := compact(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cp.pod(); err != nil {
			b.Fatal(err)
		}
		size = len(cp.packed)
	}
	b.ReportMetric(float64(size), "packed-bytes")
}

// BenchmarkPodFromTheWatch is what each pod of the watch costs until it is
// cached: decoded by client-go's protobuf serializer and encoded again by
// compact (the typed client's path), or read encoded (rawPods).
func BenchmarkPodFromTheWatch(b *testing.B) {
	p := benchPod()
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
			if _, err := compactTransform(obj); err != nil {
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
			if _, err := compactTransform(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStatusWrite is a status write's round trip, against an HTTP/2
// server answering as the API server does (the whole pod, managed fields
// included), as patchStatus sent it before (client-go's Request.Do: the answer
// read by io.ReadAll, then decoded as a rawPod) and as it does now (Stream: the
// answer read into a reused buffer, the fingerprint taken off its encoding).
func BenchmarkStatusWrite(b *testing.B) {
	p := benchPod()
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
	rp, ok := newRawPods(client)
	if !ok {
		b.Fatal("no REST client")
	}
	c := &Controller{rawPods: rp}
	patch := []byte(`{"status":{"phase":"Running"}}`)
	ctx := context.Background()
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		defer b.ReportMetric(float64(answer.Len()), "answer-bytes")
		for b.Loop() {
			var written rawPod
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
			if _, err := c.patchStatus(ctx, "ns", "bench", patch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWithStatus is what each status check decodes of the cached pod: its
// status and, walking the spec's fields, its readiness gates.
func BenchmarkWithStatus(b *testing.B) {
	cp, err := compact(benchPod())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cp.withStatus(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResourcesSpec: what a status check of a provider that resizes in
// place adds, reading the containers' resources from the cached pod.
func BenchmarkResourcesSpec(b *testing.B) {
	cp, err := compact(benchPod())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cp.resourcesSpec(); err != nil {
			b.Fatal(err)
		}
	}
}
