package pod

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// recordingListWatch answers with fake watches and counts its calls.
type recordingListWatch struct {
	lists, watches int
	watchErr       error
	fakes          []*watch.FakeWatcher
}

func (r *recordingListWatch) lw() cache.ListerWatcherWithContext {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			r.lists++
			return &corev1.PodList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			r.watches++
			if r.watchErr != nil {
				return nil, r.watchErr
			}
			w := watch.NewFakeWithChanSize(10, false)
			r.fakes = append(r.fakes, w)
			return w, nil
		},
	}
}

func boundWatchOf(own, bound *recordingListWatch, auto bool) *boundPodsListWatch {
	return &boundPodsListWatch{own: own.lw(), bound: bound.lw(), node: "n1", narrowIfRefused: auto,
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node}}
}

// rawPodOn is podOn as the pod watch reads it, encoded.
func rawPodOn(t *testing.T, name, node string) *podwire.RawPod {
	t.Helper()
	b, err := podOn(name, node).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := &podwire.RawPod{}
	if err := p.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	return p
}

// The node lists its own pods and watches every bound pod, of which it sees
// its own pods' events, bookmarks and errors: what the node's own watch sends.
func TestABoundPodsWatchPassesOnTheNodesEventsOnly(t *testing.T) {
	own, bound := &recordingListWatch{}, &recordingListWatch{}
	lw := boundWatchOf(own, bound, false)
	if _, err := lw.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if own.lists != 1 || own.watches != 0 || bound.lists != 0 || bound.watches != 1 {
		t.Fatalf("own: %d lists %d watches; bound: %d lists %d watches; want the node's list and the bound pods' watch",
			own.lists, own.watches, bound.lists, bound.watches)
	}
	if !lw.IsWatchListSemanticsUnSupported() {
		t.Error("a streamed list would come through the watch of every bound pod")
	}

	sent := []watch.Event{
		{Type: watch.Added, Object: podOn("theirs", "n2")},
		{Type: watch.Added, Object: podOn("mine", "n1")},
		{Type: watch.Modified, Object: rawPodOn(t, "theirs-raw", "n2")},
		{Type: watch.Modified, Object: rawPodOn(t, "mine-raw", "n1")},
		{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9"}}},
		{Type: watch.Deleted, Object: podOn("theirs", "n2")},
		{Type: watch.Deleted, Object: podOn("mine", "n1")},
		{Type: watch.Error, Object: &metav1.Status{Reason: metav1.StatusReasonExpired}},
	}
	go func() {
		for _, e := range sent {
			bound.fakes[0].Action(e.Type, e.Object)
		}
	}()
	var got []string
	for range 5 {
		select {
		case e := <-w.ResultChan():
			got = append(got, string(e.Type)+" "+nameOf(e.Object))
		case <-time.After(5 * time.Second):
			t.Fatalf("got %v, then nothing", got)
		}
	}
	want := []string{"ADDED mine", "MODIFIED mine-raw", "BOOKMARK ", "DELETED mine", "ERROR Expired"}
	if !slices.Equal(got, want) {
		t.Errorf("passed on %v, want %v", got, want)
	}
}

// nameOf is a pod's name, or a Status's reason.
func nameOf(obj runtime.Object) string {
	switch o := obj.(type) {
	case *podwire.RawPod:
		return o.Name
	case *corev1.Pod:
		return o.Name
	case *metav1.Status:
		return string(o.Reason)
	}
	return fmt.Sprintf("%T", obj)
}

// With WatchAuto, a credential that may watch only the node's pods (the Node
// authorizer's node identity) gets the node's watch, from the first refusal on;
// with WatchBoundPods the refusal is the error it is.
func TestARefusedBoundPodsWatchNarrowsToTheNodesPodsInAutoOnly(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", io.EOF)

	own, bound := &recordingListWatch{}, &recordingListWatch{watchErr: forbidden}
	if _, err := boundWatchOf(own, bound, false).Watch(metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("bound: %v, want the Forbidden", err)
	}

	own, bound = &recordingListWatch{}, &recordingListWatch{watchErr: forbidden}
	lw := boundWatchOf(own, bound, true)
	for i := range 2 {
		w, err := lw.Watch(metav1.ListOptions{})
		if err != nil {
			t.Fatalf("auto, watch %d: %v", i, err)
		}
		w.Stop()
	}
	if bound.watches != 1 || own.watches != 2 {
		t.Errorf("auto: %d bound watches and %d of the node's, want 1 refused and then the node's (2)", bound.watches, own.watches)
	}
}

func TestAnUnknownPodWatchScopeIsAnError(t *testing.T) {
	_, err := nodePodsListWatch(fake.NewClientset(), nil, "n1", "cluster", nil)
	if err == nil || !strings.Contains(err.Error(), `"cluster"`) {
		t.Fatalf("err %v, want one naming the scope", err)
	}
}
