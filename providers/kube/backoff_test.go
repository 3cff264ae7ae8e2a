package kube

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// recreate tries again from 500ms, doubling, up to 30s, each wait up to 20%
// longer at random (synctest's clock measures the waits).
func TestRecreateBacksOffWithJitterFromHalfASecondToThirtySeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const failures = 8
		var calls []time.Time
		client := fake.NewClientset()
		client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			calls = append(calls, time.Now())
			if len(calls) <= failures {
				return true, nil, errdefs.Unavailable("target overloaded")
			}
			return false, nil, nil
		})
		cfg := Config{Kubeconfig: "unused", ClusterID: "east"}
		if err := cfg.complete(); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "nginx"}}}}
		rp := &provider.ResolvedPod{Pod: pod}
		p := &Provider{cfg: cfg, nodeName: "vk", m: newMapper(cfg, "vk", ""), client: client,
			log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctx: context.Background(),
			records: map[string]*record{"ns/web": {uid: pod.UID, rp: rp}}, namespaces: map[string]bool{}}
		start := time.Now()
		p.recreate("ns/web", rp)
		if len(calls) != failures+1 {
			t.Fatalf("%d creates, want %d (%d failures, then success)", len(calls), failures+1, failures)
		}
		jittered := false
		last := calls[0]
		if calls[0] != start {
			t.Errorf("the first create came %s after the start, want at once", calls[0].Sub(start))
		}
		for i, want := range []time.Duration{500, 1000, 2000, 4000, 8000, 16000, 30000, 30000} {
			want *= time.Millisecond
			got := calls[i+1].Sub(last)
			last = calls[i+1]
			if got < want || got > want*6/5 {
				t.Errorf("wait %d: %s, want %s to %s", i+1, got, want, want*6/5)
			}
			jittered = jittered || got != want
		}
		if !jittered {
			t.Error("every wait is exactly its base: no jitter")
		}
	})
}
