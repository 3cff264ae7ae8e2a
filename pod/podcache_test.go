package pod

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

func TestCachedPodKeepsThePodWithoutManagedFields(t *testing.T) {
	p := benchPod()
	p.UID, p.ResourceVersion = "uid-1", "42"
	now := metav1.NewTime(time.Unix(1_800_000_000, 0)) // whole seconds, as the API keeps them
	p.DeletionTimestamp = &now
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	p.Status.Phase = corev1.PodSucceeded

	obj, err := compactTransform(p)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		t.Fatalf("transform gave a %T", obj)
	}
	if cp.Name != p.Name || cp.Namespace != p.Namespace || cp.UID != "uid-1" || cp.ResourceVersion != "42" ||
		cp.DeletionTimestamp == nil || !cp.terminal || cp.key() != keyOf(p) {
		t.Fatalf("routing fields wrong: %+v", cp)
	}
	// The informer reads keys and versions through meta.Accessor.
	if key, err := cache.MetaNamespaceKeyFunc(cp); err != nil || key != keyOf(p) {
		t.Fatalf("informer key = %q, %v; want %q", key, err, keyOf(p))
	}
	if m, err := meta.Accessor(cp); err != nil || m.GetResourceVersion() != "42" || m.GetUID() != "uid-1" {
		t.Fatalf("meta.Accessor = %v, %v", m, err)
	}
	got, err := cp.pod()
	if err != nil {
		t.Fatal(err)
	}
	want := p.DeepCopy()
	want.ManagedFields = nil
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("decoded pod differs:\ngot  %+v\nwant %+v", got, want)
	}
	// Each decode is the caller's own copy.
	got.Labels["changed"] = "yes"
	if again, _ := cp.pod(); again.Labels["changed"] != "" {
		t.Fatal("two decodes share an object")
	}
	// A copy of the cached object (the informer makes them) is equal to it.
	if c2 := cp.DeepCopyObject().(*cachedPod); c2.key() != cp.key() || string(c2.packed) != string(cp.packed) {
		t.Fatal("DeepCopyObject lost the pod")
	}
	// Tombstones and anything else pass unchanged.
	if obj, _ := compactTransform("tombstone"); obj != "tombstone" {
		t.Fatalf("transform changed a non-pod: %v", obj)
	}
}

func TestATombstoneWithoutAnObjectStillStopsThePod(t *testing.T) {
	f := newFixture(t)
	f.start()
	f.c.handleDeletedPod(cache.DeletedFinalStateUnknown{Key: "ns/gone"})
	if n := f.c.deleteQueue.Len(); n != 1 {
		t.Fatalf("delete queue holds %d keys, want 1", n)
	}
	if key, _ := f.c.deleteQueue.Get(); key != "ns/gone" {
		t.Fatalf("queued %q, want ns/gone", key)
	}
}

func TestStatusFieldIsThePodsEncodedStatus(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}}
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := p.Status.Marshal()
	if got := apiwire.Field(raw, podStatusField); !bytes.Equal(got, want) {
		t.Fatalf("apiwire.Field(status) = %x, want %x", got, want)
	}
	a, _ := compact(p.DeepCopy())
	q := p.DeepCopy()
	q.Labels = map[string]string{"x": "y"}
	b, _ := compact(q)
	q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	c, _ := compact(q)
	if a.statusHash != b.statusHash || b.statusHash == c.statusHash {
		t.Errorf("status hashes: same status %x/%x, changed status %x; want equal, then different", a.statusHash, b.statusHash, c.statusHash)
	}
}

// The spec fingerprint changes with what an update may tell a provider (spec,
// labels, annotations) and not with status or bookkeeping metadata.
func TestSpecHashFollowsSpecLabelsAndAnnotations(t *testing.T) {
	base := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "1",
		Labels: map[string]string{"app": "web", "tier": "front"}, Annotations: map[string]string{"note": "x"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	hash := func(change func(p *corev1.Pod)) uint64 {
		p := base.DeepCopy()
		change(p)
		cp, err := compact(p)
		if err != nil {
			t.Fatal(err)
		}
		return cp.specHash
	}
	h0 := hash(func(*corev1.Pod) {})
	for name, change := range map[string]func(p *corev1.Pod){
		"status":           func(p *corev1.Pod) { p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1" },
		"resourceVersion":  func(p *corev1.Pod) { p.ResourceVersion = "2" },
		"managedFields":    func(p *corev1.Pod) { p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}} },
		"labels rewritten": func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "front", "app": "web"} },
	} {
		if h := hash(change); h != h0 {
			t.Errorf("%s changed the spec hash", name)
		}
	}
	for name, change := range map[string]func(p *corev1.Pod){
		"image":          func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox:2" },
		"label value":    func(p *corev1.Pod) { p.Labels["app"] = "api" },
		"label added":    func(p *corev1.Pod) { p.Labels["new"] = "" },
		"annotation":     func(p *corev1.Pod) { p.Annotations["note"] = "y" },
		"label to annot": func(p *corev1.Pod) { delete(p.Labels, "tier"); p.Annotations["tier"] = "front" },
		"ephemeral":      func(p *corev1.Pod) { p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}} },
		"activeDeadline": func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64) },
	} {
		if h := hash(change); h == h0 {
			t.Errorf("%s left the spec hash as it was", name)
		}
	}
}

// withStatus decodes the same status as the whole pod, with the cached metadata,
// the generation, the readiness gates and the active deadline.
func TestWithStatusIsThePodsStatus(t *testing.T) {
	now := metav1.NewTime(time.Now().Truncate(time.Second)) // as encoded
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &now, Generation: 3},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, ActiveDeadlineSeconds: ptr.To[int64](600),
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/load-balancer"}, {ConditionType: "example.com/mesh"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", StartTime: &now,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2}}}}
	cp, err := compact(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cp.withStatus()
	if err != nil {
		t.Fatal(err)
	}
	want := p.DeepCopy()
	want.Spec = corev1.PodSpec{ReadinessGates: p.Spec.ReadinessGates, ActiveDeadlineSeconds: p.Spec.ActiveDeadlineSeconds}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("withStatus = %+v\nwant %+v", got, want)
	}
}

// sameString reports whether a and b are one string in memory, not two equal ones.
func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b))
}

func TestAPodKeepsOneCopyOfItsNameAndUID(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	transform := compactTransformOf(store)
	incarnation := func(uid types.UID, rv string) *cachedPod {
		p := benchPod()
		// Strings of their own, as a decoder makes them.
		p.Name, p.UID, p.ResourceVersion = strings.Clone(p.Name), types.UID(strings.Clone(string(uid))), rv
		obj, err := transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*cachedPod)
	}
	first := incarnation("uid-1", "1")
	if err := store.Add(first); err != nil {
		t.Fatal(err)
	}
	// The pod's own status write coming back: the same incarnation.
	second := incarnation("uid-1", "2")
	if !sameString(second.Name, first.Name) || !sameString(string(second.UID), string(first.UID)) {
		t.Error("a newer version of the pod keeps copies of its name and UID of its own")
	}
	if second.ResourceVersion != "2" {
		t.Errorf("resource version %q, want 2", second.ResourceVersion)
	}
	// Another incarnation under the same name keeps its own UID.
	other := incarnation("uid-2", "3")
	if other.UID != "uid-2" {
		t.Errorf("a new incarnation has UID %q, want uid-2", other.UID)
	}
	// A decoded pod shares the cache's strings, which the provider and the
	// resolver keep.
	p, err := second.pod()
	if err != nil {
		t.Fatal(err)
	}
	if !sameString(p.Name, second.Name) || !sameString(string(p.UID), string(second.UID)) || !sameString(p.Namespace, second.Namespace) {
		t.Error("a decoded pod has copies of the cache's name, namespace and UID")
	}
}

// The informer reads a cached pod's key and resource version without making
// anything: the cachedPod is its own read-only metav1.Object.
func TestACachedPodIsItsOwnObjectMeta(t *testing.T) {
	now := metav1.Now()
	c := &cachedPod{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now}
	m, err := meta.Accessor(c)
	if err != nil || m != metav1.Object(c) {
		t.Fatalf("accessor %T, %v", m, err)
	}
	if m.GetNamespace() != "ns" || m.GetName() != "p" || m.GetUID() != "u" || m.GetResourceVersion() != "7" || m.GetDeletionTimestamp() != &now {
		t.Fatalf("metadata %s/%s %s %s %v", m.GetNamespace(), m.GetName(), m.GetUID(), m.GetResourceVersion(), m.GetDeletionTimestamp())
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = cache.ObjectToName(c) }); n != 0 {
		t.Fatalf("ObjectToName allocates %v times", n)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a setter changed a cached pod")
		}
	}()
	m.SetResourceVersion("8")
}
