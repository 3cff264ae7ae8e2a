package remote_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// benchPod is a Deployment's pod as the agent hands it over: labels, an owner,
// three variables and the kube-api-access volume's files (a 1 KiB token).
func benchPod(i int) *provider.ResolvedPod {
	token := make([]byte, 1024)
	for j := range token {
		token[j] = 'a' + byte(j%26)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("web-7d4b9c-%07d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d4b9c"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4b9c", UID: "rs"}}},
		Spec: corev1.PodSpec{NodeName: "bench", Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27",
			Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "C", Value: "3"}}}}},
	}
	return &provider.ResolvedPod{Pod: pod,
		Env: map[string][]corev1.EnvVar{"web": pod.Spec.Containers[0].Env},
		Volumes: map[string]*provider.VolumeContents{"kube-api-access-x": {Files: []provider.VolumeFile{
			{Path: "token", Data: token, Mode: 0o644}, {Path: "ca.crt", Data: make([]byte, 1100), Mode: 0o644}, {Path: "namespace", Data: []byte("bench"), Mode: 0o644}}}},
	}
}

var podSeq atomic.Int64

// BenchmarkCreatePod is the protocol's cost per pod create: the mock in process,
// and the same mock behind a unix socket (encode, gRPC, decode, both ways).
func BenchmarkCreatePod(b *testing.B) {
	ctx := context.Background()
	inProcess, err := mock.New(mock.Config{}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	served, err := mock.New(mock.Config{}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	c, err := remote.New(ctx, remote.Config{Endpoint: serve(b, served, "mock")}, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name   string
		create func(context.Context, *provider.ResolvedPod) error
	}{
		{"in-process", inProcess.CreateResolvedPod},
		{"unix-socket", c.CreateResolvedPod},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pods := make([]*provider.ResolvedPod, b.N)
			for i := range pods {
				pods[i] = benchPod(int(podSeq.Add(1))) // new pods each round
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tc.create(ctx, pods[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDeletePod is the protocol's cost per pod delete as the pod controller
// makes it, the delete and then the status read: through a provider without
// stop_pod (DeletePod, then GetPodStatus, two round trips) and through one with
// it (StopPod, one).
func BenchmarkDeletePod(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		old  bool
	}{
		{"delete-then-status", true},
		{"stop-pod", false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := mock.New(mock.Config{}, "bench")
			if err != nil {
				b.Fatal(err)
			}
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			p := &recordingProvider{Server: remote.NewServer(ctx, m, "mock", quiet), old: tc.old}
			c, err := remote.New(ctx, remote.Config{Endpoint: serveRecordingFor(b, p)}, "bench", quiet)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			pods := make([]*provider.ResolvedPod, b.N)
			for i := range pods {
				pods[i] = benchPod(int(podSeq.Add(1)))
				if err := m.CreateResolvedPod(ctx, pods[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pod := pods[i].Pod
				if err := c.DeletePod(ctx, pod); err != nil {
					b.Fatal(err)
				}
				if _, err := c.GetPodStatus(ctx, pod.Namespace, pod.Name); err != nil && !errdefs.IsNotFound(err) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPodNotice is a WatchPods notice of a running pod, encoded by the
// provider's end and decoded by the agent's: the whole pod, as providers send
// without status_only, and its identity and status alone.
func BenchmarkPodNotice(b *testing.B) {
	m, err := mock.New(mock.Config{}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	rp := benchPod(0)
	if err := m.CreateResolvedPod(context.Background(), rp); err != nil {
		b.Fatal(err)
	}
	pod, err := m.GetPod(context.Background(), rp.Pod.Namespace, rp.Pod.Name)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		notice *corev1.Pod
	}{
		{"whole-pod", pod},
		{"status-only", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, Status: pod.Status}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				data, err := tc.notice.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				got := &corev1.Pod{}
				if err := got.Unmarshal(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
