package podwire

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// typicalPod is a pod of realistic size: three containers with resources,
// labels, annotations and the tolerations admission adds.
func typicalPod() *corev1.Pod {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bench", UID: "uid-bench",
			Labels:      map[string]string{"app": "bench", "pod-template-hash": "5fc9f4bf66"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z", "prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{
			NodeName:      "node-1",
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{
				{Name: "app", Image: "registry.example/app:1.2.3", Resources: res},
				{Name: "sidecar", Image: "registry.example/proxy:4.5", Resources: res},
				{Name: "logs", Image: "registry.example/logs:7", Resources: res},
			},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func TestCachedPodKeepsThePodWithoutManagedFields(t *testing.T) {
	p := typicalPod()
	p.UID, p.ResourceVersion = "uid-1", "42"
	now := metav1.NewTime(time.Unix(1_800_000_000, 0)) // whole seconds, as the API keeps them
	p.DeletionTimestamp = &now
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	p.Status.Phase = corev1.PodSucceeded

	obj, err := transform(p)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := obj.(*Pod)
	if !ok {
		t.Fatalf("transform gave a %T", obj)
	}
	if cp.Name != p.Name || cp.Namespace != p.Namespace || cp.UID != "uid-1" || cp.ResourceVersion != "42" ||
		cp.DeletionTimestamp == nil || !cp.terminal || cp.Key() != p.Namespace+"/"+p.Name {
		t.Fatalf("routing fields wrong: %+v", cp)
	}
	// The informer reads keys and versions through meta.Accessor.
	if key, err := cache.MetaNamespaceKeyFunc(cp); err != nil || key != p.Namespace+"/"+p.Name {
		t.Fatalf("informer key = %q, %v; want %q", key, err, p.Namespace+"/"+p.Name)
	}
	if m, err := meta.Accessor(cp); err != nil || m.GetResourceVersion() != "42" || m.GetUID() != "uid-1" {
		t.Fatalf("meta.Accessor = %v, %v", m, err)
	}
	got, err := cp.Decode()
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
	if again, _ := cp.Decode(); again.Labels["changed"] != "" {
		t.Fatal("two decodes share an object")
	}
	// A copy of the cached object (the informer makes them) is equal to it.
	if c2 := cp.DeepCopyObject().(*Pod); c2.Key() != cp.Key() || string(c2.packed) != string(cp.packed) {
		t.Fatal("DeepCopyObject lost the pod")
	}
	// Tombstones and anything else pass unchanged.
	if obj, _ := transform("tombstone"); obj != "tombstone" {
		t.Fatalf("transform changed a non-pod: %v", obj)
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
	a, _ := Compact(p.DeepCopy())
	q := p.DeepCopy()
	q.Labels = map[string]string{"x": "y"}
	b, _ := Compact(q)
	q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	c, _ := Compact(q)
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
		cp, err := Compact(p)
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
	cp, err := Compact(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cp.WithStatus()
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
	transform := TransformOf(store)
	incarnation := func(uid types.UID, rv string) *Pod {
		p := typicalPod()
		// Strings of their own, as a decoder makes them.
		p.Name, p.UID, p.ResourceVersion = strings.Clone(p.Name), types.UID(strings.Clone(string(uid))), rv
		obj, err := transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*Pod)
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
	p, err := second.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if !sameString(p.Name, second.Name) || !sameString(string(p.UID), string(second.UID)) || !sameString(p.Namespace, second.Namespace) {
		t.Error("a decoded pod has copies of the cache's name, namespace and UID")
	}
}

// A cached pod's key is one string with its name: reading it makes nothing,
// in the Pod and in its copies.
func TestAPodsKeyCostsNothing(t *testing.T) {
	p := typicalPod()
	cp, err := Compact(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := p.Namespace + "/" + p.Name
	copied := cp.DeepCopyObject().(*Pod)
	for _, c := range []*Pod{cp, copied} {
		if got := c.Key(); got != want {
			t.Errorf("key %q, want %q", got, want)
		}
		if n := testing.AllocsPerRun(10, func() { _ = c.Key() }); n != 0 {
			t.Errorf("reading the key made %v allocations", n)
		}
	}
	if !sameString(cp.Key(), copied.Key()) {
		t.Error("a copy's key is a copy of the key")
	}
	// A Pod with no name has a key all the same.
	nameless := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	if c, err := Compact(nameless); err != nil || c.Key() != "shop/" {
		t.Errorf("a nameless pod's key: %v", err)
	}
}

// The informer reads a cached pod's key and resource version without making
// anything: the Pod is its own read-only metav1.Object.
func TestACachedPodIsItsOwnObjectMeta(t *testing.T) {
	now := metav1.Now()
	c := &Pod{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now}
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

func TestResourcesSpecIsThePodsResourcesAndNothingElse(t *testing.T) {
	p := typicalPod()
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:4.5", RestartPolicy: &always,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}}
	p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	want := &corev1.PodSpec{Resources: p.Spec.Resources}
	for _, c := range p.Spec.Containers {
		want.Containers = append(want.Containers, corev1.Container{Name: c.Name, Resources: c.Resources})
	}
	want.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always, Resources: p.Spec.InitContainers[0].Resources}}
	cp, err := Compact(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cp.ResourcesSpec()
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("ResourcesSpec = %+v\nwant %+v", got, want)
	}
}
