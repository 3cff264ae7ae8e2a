package remote

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// A resolved pod crosses the wire whole, in either encoding: the environment of
// its ephemeral containers too, keyed by name like any container's.
func TestAResolvedPodRoundTrips(t *testing.T) {
	rp := &provider.ResolvedPod{
		Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}, TargetContainerName: "c"}}}},
		Env:             map[string][]corev1.EnvVar{"c": {{Name: "A", Value: "1"}, {Name: "B", Value: "two"}}, "debugger": {{Name: "WHO", Value: "resolved"}}},
		Volumes:         map[string]*provider.VolumeContents{"v": {Files: []provider.VolumeFile{{Path: "d/f", Data: []byte("data"), Mode: 0o600}}}},
		PullCredentials: []provider.RegistryCredential{{Registry: "r.example", Username: "u", Password: "p", Auth: "dTpw", IdentityToken: "t"}},
	}
	for _, enc := range []pb.Encoding{pb.Encoding_ENCODING_JSON, pb.Encoding_ENCODING_PROTOBUF} {
		req, err := podRequest(enc, rp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := resolvedPod(enc, req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, rp) {
			t.Errorf("%s: got %+v, want %+v", enc, got, rp)
		}
	}
	if _, err := resolvedPod(pb.Encoding_ENCODING_JSON, &pb.PodRequest{Pod: []byte("{not json")}); !errdefs.IsInvalidInput(err) {
		t.Errorf("a pod that does not decode: %v, want InvalidInput", err)
	}
}

// Error classes survive the trip to a gRPC status and back.
func TestErrorClassesCrossTheWire(t *testing.T) {
	for _, tc := range []struct {
		err error
		is  func(error) bool
	}{
		{errdefs.NotFound("pod x"), errdefs.IsNotFound},
		{errdefs.InvalidInput("bad"), errdefs.IsInvalidInput},
		{errdefs.NotImplemented("no exec"), errdefs.IsNotImplemented},
		{errdefs.Unavailable("down"), errdefs.IsUnavailable},
		{fmt.Errorf("wrapped: %w", errdefs.NotFound("deep")), errdefs.IsNotFound},
	} {
		back := fromStatus(toStatus(tc.err))
		if !tc.is(back) {
			t.Errorf("%v came back as %v, of another class", tc.err, back)
		}
	}
	if err := fromStatus(toStatus(fmt.Errorf("disk full"))); err == nil || errdefs.IsNotFound(err) || err.Error() != "disk full" {
		t.Errorf("a plain error came back as %v", err)
	}
}

// FuzzPodRequest feeds a PodRequest as the provider's side reads it from the
// network, in both encodings: bytes it cannot read are an InvalidInput error,
// never a panic, and a request it reads is the request re-encoded and read
// again (nothing lost or made up between the wire and the provider).
func FuzzPodRequest(f *testing.F) {
	rp := &provider.ResolvedPod{
		Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		Env:             map[string][]corev1.EnvVar{"c": {{Name: "A", Value: "1"}}},
		Volumes:         map[string]*provider.VolumeContents{"v": {Files: []provider.VolumeFile{{Path: "f", Data: []byte("x"), Mode: 0o644}}}},
		PullCredentials: []provider.RegistryCredential{{Registry: "r", Username: "u", Password: "p"}},
	}
	for _, enc := range []pb.Encoding{pb.Encoding_ENCODING_JSON, pb.Encoding_ENCODING_PROTOBUF} {
		req, err := podRequest(enc, rp)
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, enc == pb.Encoding_ENCODING_PROTOBUF)
	}
	f.Fuzz(func(t *testing.T, data []byte, protobuf bool) {
		enc := pb.Encoding_ENCODING_JSON
		if protobuf {
			enc = pb.Encoding_ENCODING_PROTOBUF
		}
		var req pb.PodRequest
		if proto.Unmarshal(data, &req) != nil {
			return // grpc-go refuses the message before our code sees it
		}
		got, err := resolvedPod(enc, &req)
		if err != nil {
			if !errdefs.IsInvalidInput(err) {
				t.Fatalf("an unreadable request is %v, not InvalidInput", err)
			}
			return
		}
		again, err := podRequest(enc, got)
		if err != nil {
			t.Fatalf("a request read does not encode again: %v", err)
		}
		back, err := resolvedPod(enc, again)
		if err != nil {
			t.Fatalf("a request read and encoded again does not read: %v", err)
		}
		if !apiequality.Semantic.DeepEqual(got, back) {
			t.Fatalf("a request read, encoded and read again changed")
		}
	})
}
