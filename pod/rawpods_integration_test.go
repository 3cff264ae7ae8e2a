package pod

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/compact/podpack"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A pod read encoded (rawPods) is cached exactly as the same pod read decoded
// through the typed client: every field the handlers read, both fingerprints
// and the packed pod, managed fields dropped. Listed and watched, for a pod
// with what the cache reads or drops: labels, annotations, an owner reference,
// a finalizer, managed fields, ephemeral containers, a terminal phase and a
// deletion timestamp. The API server's Status objects are decoded as before.
func TestAPodReadEncodedIsCachedAsWhenDecoded(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, ok := newRawPods(c)
	if !ok {
		t.Fatal("newRawPods: no REST client in a real clientset")
	}
	owner, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "raw", Labels: map[string]string{"app": "web", "tier": "front"},
			Annotations:     map[string]string{"note": "kept"},
			Finalizers:      []string{"vkubelet.io/test"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}},
		Spec: corev1.PodSpec{NodeName: "raw-node-" + ns, Containers: []corev1.Container{{Name: "c", Image: "nginx",
			Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}},
	}, metav1.CreateOptions{FieldManager: "rawpods-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.CoreV1().Pods(ns).Patch(context.Background(), "raw", "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if len(p.ManagedFields) == 0 {
		t.Fatal("the API server kept no managed fields: nothing to drop")
	}
	sameAsDecoded := func(t *testing.T, step string, got *rawPod) {
		t.Helper()
		want, err := c.CoreV1().Pods(ns).Get(ctx, "raw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want.ResourceVersion != got.ResourceVersion {
			t.Fatalf("%s: the pod changed under the test (%s, %s)", step, want.ResourceVersion, got.ResourceVersion)
		}
		wantCached, err := compact(want.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		gotCached := compactRaw(got)
		if !reflect.DeepEqual(gotCached, wantCached) {
			t.Errorf("%s: read encoded, the pod is cached as\n%+v\nread decoded, as\n%+v", step, gotCached, wantCached)
		}
		unpacked, err := podpack.Unpack(gotCached.packedBytes())
		if err != nil {
			t.Fatal(err)
		}
		want.ManagedFields = nil
		if !apiequality.Semantic.DeepEqual(unpacked, want) {
			t.Errorf("%s: the packed pod is\n%+v\nwant\n%+v", step, unpacked, want)
		}
		if got.Labels != nil || got.OwnerReferences != nil || got.ManagedFields != nil || got.Annotations["note"] != "kept" {
			t.Errorf("%s: the informer's metadata: labels %v, owners %v, managed fields %d, annotations %v (want only the annotations)",
				step, got.Labels, got.OwnerReferences, len(got.ManagedFields), got.Annotations)
		}
	}

	list := func(step string) *rawPodList {
		l, err := raw.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=raw"})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(l.Items) != 1 || l.ResourceVersion == "" {
			t.Fatalf("%s: listed %d pods, resourceVersion %q", step, len(l.Items), l.ResourceVersion)
		}
		return l
	}
	l := list("created")
	sameAsDecoded(t, "listed", &l.Items[0])

	w, err := raw.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=raw", ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func(step string, change func(kubernetes.Interface) error) *rawPod {
		t.Helper()
		if err := change(c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		select {
		case ev := <-w.ResultChan():
			rp, ok := ev.Object.(*rawPod)
			if ev.Type != watch.Modified || !ok {
				t.Fatalf("%s: watch event %s of a %T", step, ev.Type, ev.Object)
			}
			return rp
		case <-ctx.Done():
			t.Fatalf("%s: no watch event", step)
		}
		return nil
	}
	pods := func(c kubernetes.Interface) func() (*corev1.Pod, error) {
		return func() (*corev1.Pod, error) { return c.CoreV1().Pods(ns).Get(ctx, "raw", metav1.GetOptions{}) }
	}
	sameAsDecoded(t, "ephemeral container", next("ephemeral container", func(c kubernetes.Interface) error {
		cur, err := pods(c)()
		if err != nil {
			return err
		}
		cur.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullAlways}}}
		_, err = c.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "raw", cur, metav1.UpdateOptions{})
		return err
	}))
	failed := next("failed", func(c kubernetes.Interface) error {
		cur, err := pods(c)()
		if err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodFailed
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	sameAsDecoded(t, "failed", failed)
	if cp := compactRaw(failed); !cp.terminal || !cp.ephemeral || cp.NodeName != "raw-node-"+ns {
		t.Errorf("failed: cached as terminal %v, ephemeral %v, node %q", cp.terminal, cp.ephemeral, cp.NodeName)
	}
	deleting := next("deleting", func(c kubernetes.Interface) error {
		return c.CoreV1().Pods(ns).Delete(ctx, "raw", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	sameAsDecoded(t, "deleting", deleting)
	if deleting.DeletionTimestamp == nil {
		t.Error("deleting: no deletion timestamp")
	}

	// The API server's Status objects are decoded as before (the errors of
	// requests and of watches go through the same decoder).
	if _, err := raw.List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("list with a bad field selector: %v, want BadRequest", err)
	}
}

// A status write comes back through the watch as an update of the pod's
// status. The controller knows it is its own (the API server's answer to the
// write tells the stored status) and does not ask the provider again; a
// status someone else writes is still checked against the provider and put
// right.
func TestTheStatusWrittenComingBackIsNotCheckedAgain(t *testing.T) {
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := "echo-" + ns
	// Without its Node, the pod garbage collector would delete the pod.
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	prov := &countingStatus{fakeProvider: newFakeProvider()}
	ctrl, err := NewController(Config{Client: c, NodeName: node, Provider: prov,
		StatusPollInterval: time.Hour, // only the watch and the writes queue status checks
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ctrl.Run(runCtx) }()
	defer func() { stop(); <-done }()

	p := newPod("echo")
	p.Namespace, p.UID, p.Spec.NodeName = ns, "", node
	if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statusChecks := func() int { return int(prov.calls.Load()) }
	// settled waits until the controller's cache has the pod's status ready as
	// want says, and then for its queues to run dry.
	settled := func(step string, want corev1.ConditionStatus) {
		t.Helper()
		for {
			cp, err := ctrl.pods.getCached(ns, "echo")
			if err == nil {
				if p, err := cp.withStatus(); err == nil && podReady(&p.Status) == want {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: the cached pod's Ready condition never was %s", step, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for quiet := 0; quiet < 25; quiet++ { // half a second with nothing queued
			if ctrl.statusQueue.Len() > 0 || ctrl.syncQueue.Len() > 0 {
				quiet = 0
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	settled("started", corev1.ConditionTrue)
	if n := statusChecks(); n != 1 {
		t.Errorf("the pod started with %d status checks, want 1 (its write coming back is not checked)", n)
	}

	// The node-lifecycle controller marks the pod not Ready while it cannot reach the node.
	cur, err := c.CoreV1().Pods(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == corev1.PodReady {
			cur.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	settled("put right", corev1.ConditionTrue)
	if n := statusChecks(); n != 2 {
		t.Errorf("after someone else's status write, %d status checks in all, want 2", n)
	}
}

// countingStatus counts GetPodStatus calls.
type countingStatus struct {
	*fakeProvider
	calls atomic.Int32
}

func (c *countingStatus) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	c.calls.Add(1)
	return c.fakeProvider.GetPodStatus(ctx, ns, name)
}

func podReady(s *corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
