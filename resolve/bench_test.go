package resolve

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// BenchmarkResolveEnv resolves the environment of a pod with literal values,
// $(VAR) references, a ConfigMap key, envFrom and the downward API, with the
// service-link variables of one Service.
func BenchmarkResolveEnv(b *testing.B) {
	src := world()
	src.svcs = []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{NodeName: "vk", Containers: []corev1.Container{{
			Name: "c", Image: "img",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}, Prefix: "CM_"}},
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "B", Value: "$(A)-two"},
				{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}},
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
		}}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := resolvePod(pod, src, parts{env: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenRequest is a TokenRequest's round trip against an HTTP/2
// server answering as the API server does, through client-go's typed client
// and as requestToken sends it (the answer read into a reused buffer).
func BenchmarkTokenRequest(b *testing.B) {
	answer := &authenticationv1.TokenRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns", CreationTimestamp: metav1.Now()},
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc.cluster.local"}, ExpirationSeconds: ptr.To[int64](3607),
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "8f0c6a36-3a51-4f38-9d2c-5c0a1b2c3d4e"}},
		Status: authenticationv1.TokenRequestStatus{Token: strings.Repeat("t", 900), ExpirationTimestamp: metav1.Now()},
	}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	var wire bytes.Buffer
	if err := info.Serializer.Encode(answer, &wire); err != nil {
		b.Fatal(err)
	}
	client := testenv.AnsweringClient(b, http.StatusCreated, wire.Bytes())
	req := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3607),
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "8f0c6a36-3a51-4f38-9d2c-5c0a1b2c3d4e"}}}
	}
	ctx := context.Background()
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "default", req(), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tr, err := requestToken(ctx, client, "ns", "default", req())
			if err != nil || len(tr.Status.Token) != 900 {
				b.Fatal(tr, err)
			}
		}
	})
}
