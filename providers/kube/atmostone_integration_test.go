package kube_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/kube"
)

// holdFinalizer keeps a target pod in the API, Terminating, as a pod whose
// containers are slow to stop stays in a real target cluster.
const holdFinalizer = "vkubelet.test/hold"

// A StatefulSet's pod deleted while its copy in the target cluster is still
// terminating (held there 5 s past its grace period of 1 s) is replaced only once
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

	var released sync.WaitGroup
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
		// Release the copy 5 s after the deletion reached it: a stop that
		// outlasts the grace period.
		released.Add(1)
		go func() {
			defer released.Done()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
				p, err := tc.CoreV1().Pods(target.Namespace).Get(ctx, target.Name, metav1.GetOptions{})
				if err == nil && p.DeletionTimestamp != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the target copy was not deleted within a minute of db-0's deletion (%v)", err)
					break
				}
			}
			time.Sleep(5 * time.Second)
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
			if _, err := tc.CoreV1().Pods(target.Namespace).Patch(ctx, target.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}, TerminationGracePeriodSeconds: ptr.To[int64](1)}
	old, replacement := testenv.ReplaceStatefulSetPod(t, ns, sourceNode, spec, hold)
	released.Wait()
	close(done)
	<-watched
	if most != 1 {
		t.Fatalf("the target held %d copies of db-0 at once, want 1", most)
	}
	t.Logf("replacement %s offloaded after the old copy of %s was gone from the target", replacement, old)
}
