package podwire

import (
	"context"
	"reflect"
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
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, controlplane.Config{}) }

// A pod read encoded (Client) is cached exactly as the same pod read decoded
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
	raw, ok := NewClient(c)
	if !ok {
		t.Fatal("NewClient: no REST client in a real clientset")
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
	sameAsDecoded := func(t *testing.T, step string, got *RawPod) {
		t.Helper()
		want, err := c.CoreV1().Pods(ns).Get(ctx, "raw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want.ResourceVersion != got.ResourceVersion {
			t.Fatalf("%s: the pod changed under the test (%s, %s)", step, want.ResourceVersion, got.ResourceVersion)
		}
		wantCached, err := Compact(want.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		gotCached := fromRaw(got)
		gotCompared, wantCompared := *gotCached, *wantCached
		if !statusEncodedAsClientGo(t) {
			// Before v1.33 a pod's status and its conditions have no
			// observedGeneration (fields 17 and 7), which client-go encodes
			// even when zero: the status's bytes, so its fingerprint and the
			// packed pod, differ by those zero fields.
			// That matters nowhere: the node compares a status's fingerprint
			// only with another of the API server's bytes (its status write's
			// answer, the watch). The unpacked pod is compared below.
			gotCompared.statusHash, wantCompared.statusHash = 0, 0
			gotCompared.packed, wantCompared.packed = "", ""
		}
		if !reflect.DeepEqual(gotCompared, wantCompared) {
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

	list := func(step string) *RawPodList {
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
	next := func(step string, change func(kubernetes.Interface) error) *RawPod {
		t.Helper()
		if err := change(c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		select {
		case ev := <-w.ResultChan():
			rp, ok := ev.Object.(*RawPod)
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
	if cp := fromRaw(failed); !cp.terminal || !cp.ephemeral || cp.NodeName != "raw-node-"+ns {
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

// statusEncodedAsClientGo reports whether the control plane's release encodes
// a pod's status as this client-go does: every field it has, v1.33 on.
func statusEncodedAsClientGo(t *testing.T) bool {
	minor, err := controlplane.MinorOf(controlplane.SelectedKubernetesVersion())
	if err != nil {
		t.Fatal(err)
	}
	return minor >= 33
}
