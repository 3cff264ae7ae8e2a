package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// The node writes status.observedGeneration, and the observedGeneration of the
// conditions it reports, as the kubelet does since Kubernetes 1.35 (KEP-5067):
// the metadata.generation of the pod it runs, following a spec change (here a
// toleration) once the provider has it.
func TestTheStatusObservesThePodsGeneration(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.PodObservedGeneration)
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	p := createPod(t, c, ns, node, appPod("gen", nil))
	if p.Generation != 1 {
		t.Fatalf("the API server gave the new pod generation %d, want 1", p.Generation)
	}
	waitObserved := func(gen int64) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			p := getPod(t, c, ns, "gen")
			ready := podCondition(p, corev1.PodReady)
			return p.Generation == gen && p.Status.Phase == corev1.PodRunning && p.Status.ObservedGeneration == gen && ready.ObservedGeneration == gen,
				fmt.Sprintf("pod generation %d, %s, status.observedGeneration %d, Ready observes %d; want %d for both",
					p.Generation, p.Status.Phase, p.Status.ObservedGeneration, ready.ObservedGeneration, gen)
		})
	}
	waitObserved(1)

	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), "gen", types.StrategicMergePatchType,
		[]byte(`{"spec":{"tolerations":[{"key":"example.com/maintenance","operator":"Exists","effect":"NoSchedule"}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitObserved(2)
	if n := prov.UpdateCalls(p.UID); n != 1 {
		t.Errorf("provider got %d updates, want 1", n)
	}
}
