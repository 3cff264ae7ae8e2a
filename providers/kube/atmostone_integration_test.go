package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/kube"
)

// holdFinalizer keeps a target pod in the API, Terminating, as a pod whose
// containers are slow to stop stays in a real target cluster.
const holdFinalizer = "vkubelet.test/hold"

// A StatefulSet's pod deleted while its copy in the target cluster is still
// terminating (its containers stopped, held there by a finalizer until the
// target has refused the replacement's copy) is replaced only once
// that copy is gone from the target: the target never holds two copies of db-0
// at once, as read in the target all along. (Copies keep their pod's name, so
// the target itself refuses a second db-0 while the first is there, even with
// --remove-unconfirmed-after; with copies named apart, as some offloaders name
// them, and that flag, this test sees two.)
func TestAStatefulSetsPodIsNeverRunTwiceInTheTarget(t *testing.T) {
	tc := setup(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	var mu sync.Mutex
	most := 0 // the most copies of db-0 the target held at once
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			l, err := tc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelOffloadedBy})
			if err != nil {
				continue
			}
			n := 0
			for _, p := range l.Items {
				if p.Annotations[kube.AnnotationOriginNamespace] == ns && p.Annotations[kube.AnnotationOriginName] == "db-0" {
					n++
				}
			}
			mu.Lock()
			most = max(most, n)
			mu.Unlock()
		}
	}()

	hold := func(old types.UID) {
		l, err := tc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelOriginUID + "=" + string(old)})
		if err != nil || len(l.Items) != 1 {
			t.Fatalf("the target copy of db-0: %d found, %v", len(l.Items), err)
		}
		target := l.Items[0]
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{holdFinalizer}}})
		if _, err := tc.CoreV1().Pods(target.Namespace).Patch(ctx, target.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// Release the copy once the old db-0 has left the source cluster (its
		// containers stopped in the target, whose node confirmed it; the copy
		// still there) and the target has refused the replacement's copy,
		// which has the same name.
		testenv.ReleaseWhen(t, 3*time.Minute, func() (bool, string) {
			p, err := testenv.Client(t).CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
			if err != nil || p.UID == old {
				return false, fmt.Sprintf("no replacement of db-0 %s yet (%v)", old, err)
			}
			reasons := testenv.EventReasons(t, ns, p.UID)
			return slices.Contains(reasons, pod.ReasonProviderFailed),
				fmt.Sprintf("events of the replacement db-0: %v, want a %s", reasons, pod.ReasonProviderFailed)
		}, func(bool) {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
			if _, err := tc.CoreV1().Pods(target.Namespace).Patch(ctx, target.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}, TerminationGracePeriodSeconds: ptr.To[int64](1)}
	old, replacement := testenv.ReplaceStatefulSetPod(t, ns, sourceNode, spec, hold)
	close(done)
	<-watched
	if most != 1 {
		t.Fatalf("the target held %d copies of db-0 at once, want 1", most)
	}
	t.Logf("replacement %s offloaded after the old copy of %s was gone from the target", replacement, old)
}
