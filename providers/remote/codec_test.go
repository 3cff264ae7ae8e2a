package remote

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
