package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// fixture is a provider on a fake target clientset.
type fixture struct {
	t      *testing.T
	client *fake.Clientset
	p      *Provider
	mu     sync.Mutex
	events []*corev1.Pod
	// onCreate, when set, runs before the fake handles a create. The
	// fake's reactor chain may not be changed once informers are running
	// (PrependReactor does not lock), so tests set this instead.
	onCreate k8stesting.ReactionFunc
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(objs...)}
	// The fake assigns no UIDs; owner references and preconditions need them.
	n := 0
	f.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		hook := f.onCreate
		f.mu.Unlock()
		if hook != nil {
			if handled, obj, err := hook(a); handled {
				return handled, obj, err
			}
		}
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetUID() == "" {
			n++
			o.SetUID(types.UID(fmt.Sprintf("target-uid-%d", n)))
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := New(ctx, Config{Kubeconfig: "unused", ClusterID: "east"}, "vk",
		WithClient(f.client), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	p.NotifyPods(ctx, func(pod *corev1.Pod) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.events = append(f.events, pod)
	})
	return f
}

// eventually polls cond for up to 5s.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	eventually.True(f.t, 5*time.Second, func() (bool, string) { return cond(), what })
}

func (f *fixture) lastEvent(key string) *corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.events) - 1; i >= 0; i-- {
		if providerutil.PodKey(f.events[i].Namespace, f.events[i].Name) == key {
			return f.events[i]
		}
	}
	return nil
}

func resolved(pod *corev1.Pod) *provider.ResolvedPod {
	return &provider.ResolvedPod{
		Pod: pod,
		Env: map[string][]corev1.EnvVar{"web": {{Name: "PASSWORD", Value: "s3cret"}, {Name: "POD_NAME", Value: pod.Name}}},
		Volumes: map[string]*provider.VolumeContents{
			"conf":  {Files: []provider.VolumeFile{{Path: "app.yaml", Data: []byte("v1")}}},
			"creds": {Files: []provider.VolumeFile{{Path: "pw", Data: []byte("s3cret")}}},
		},
	}
}

func TestCreateMakesNamespaceCopiesAndPodOwningThem(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CoreV1().Namespaces().Get(ctx, "shop-east", metav1.GetOptions{}); err != nil {
		t.Fatalf("target namespace: %v", err)
	}
	tp, err := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms, _ := f.client.CoreV1().ConfigMaps("shop-east").List(ctx, metav1.ListOptions{})
	secrets, _ := f.client.CoreV1().Secrets("shop-east").List(ctx, metav1.ListOptions{})
	if len(cms.Items) != 1 || len(secrets.Items) != 2 {
		t.Fatalf("%d ConfigMaps and %d Secrets, want 1 and 2 (volume, volume + env)", len(cms.Items), len(secrets.Items))
	}
	var objs []metav1.Object
	for i := range cms.Items {
		objs = append(objs, &cms.Items[i])
	}
	for i := range secrets.Items {
		objs = append(objs, &secrets.Items[i])
	}
	for _, o := range objs {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != tp.UID || refs[0].Kind != "Pod" {
			t.Errorf("%s owner references = %v, want the target pod %s", o.GetName(), refs, tp.UID)
		}
		if o.GetLabels()[LabelOffloadedBy] != "east.vk" {
			t.Errorf("%s lacks our label", o.GetName())
		}
	}

	// Idempotent by UID: no second pod, no error.
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatalf("second create: %v", err)
	}
	f.eventually("the informer to see the pod", func() bool { return f.p.cached("shop", "web-1") != nil })
	pods, err := f.p.GetPods(ctx)
	if err != nil || len(pods) != 1 || pods[0].UID != src.UID || pods[0].Namespace != "shop" {
		t.Fatalf("GetPods = %v, %v", pods, err)
	}
}

func TestCreateRefusesAPodNotOurs(t *testing.T) {
	f := newFixture(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop-east"}})
	err := f.p.CreateResolvedPod(context.Background(), resolved(sourcePod()))
	if !errdefs.IsInvalidInput(err) {
		t.Fatalf("create over a foreign pod: %v, want InvalidInput", err)
	}
}

func TestStatusFlowsBackThroughTheNotifier(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	// Before the informer sees it the pod is Pending, not lost.
	if st, err := f.p.GetPodStatus(ctx, "shop", "web-1"); err != nil || st.Phase == "" {
		t.Fatalf("status right after create: %v, %v", st, err)
	}
	tp, _ := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
	tp.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.7",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if _, err := f.client.CoreV1().Pods("shop-east").UpdateStatus(ctx, tp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("a Running notification", func() bool {
		e := f.lastEvent("shop/web-1")
		return e != nil && e.Status.Phase == corev1.PodRunning && e.UID == src.UID && e.Status.PodIP == "10.244.1.7"
	})
	st, err := f.p.GetPodStatus(ctx, "shop", "web-1")
	if err != nil || st.Phase != corev1.PodRunning || len(st.ContainerStatuses) != 1 {
		t.Fatalf("GetPodStatus = %v, %v", st, err)
	}
}

func TestDeleteUsesTheSourceGracePeriod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	f.eventually("the informer to see the pod", func() bool { return f.p.cached("shop", "web-1") != nil })
	f.client.ClearActions()
	src.DeletionGracePeriodSeconds = ptr.To[int64](7)
	if err := f.p.DeletePod(ctx, src); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, a := range f.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			found = true
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 7 {
				t.Errorf("grace period %v, want 7", g)
			}
		}
	}
	if !found {
		t.Fatal("no pod deletion sent to the target")
	}
	f.eventually("the pod to be gone", func() bool {
		_, err := f.p.GetPodStatus(ctx, "shop", "web-1")
		return errdefs.IsNotFound(err)
	})
	if err := f.p.DeletePod(ctx, src); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v, want NotFound", err)
	}
}

func TestTargetPodDeletedBehindOurBackIsCreatedAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.p.CreateResolvedPod(ctx, resolved(sourcePod())); err != nil {
		t.Fatal(err)
	}
	first, _ := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
	f.eventually("the informer to see the pod", func() bool { return f.p.cached("shop", "web-1") != nil })
	if err := f.client.CoreV1().Pods("shop-east").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("a new target pod", func() bool {
		tp, err := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
		return err == nil && tp.UID != first.UID
	})
}

func TestTargetPodDeletedBehindOurBackFailsWithRestartPolicyNever(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	src.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	f.eventually("the informer to see the pod", func() bool { return f.p.cached("shop", "web-1") != nil })
	if err := f.client.CoreV1().Pods("shop-east").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("a Failed notification", func() bool {
		e := f.lastEvent("shop/web-1")
		return e != nil && e.Status.Phase == corev1.PodFailed && e.Status.Reason == "TargetPodDeleted"
	})
	if st, err := f.p.GetPodStatus(ctx, "shop", "web-1"); err != nil || st.Phase != corev1.PodFailed {
		t.Fatalf("GetPodStatus = %v, %v", st, err)
	}
	if _, err := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod re-created despite restartPolicy Never: %v", err)
	}
}

func TestUpdateAppliesLabelsAndImages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	src = src.DeepCopy()
	src.Labels["version"] = "2"
	src.Spec.Containers[0].Image = "nginx:2"
	if err := f.p.UpdateResolvedPod(ctx, &provider.ResolvedPod{Pod: src}); err != nil {
		t.Fatal(err)
	}
	tp, _ := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
	if tp.Labels["version"] != "2" || tp.Labels[LabelOffloadedBy] != "east.vk" || tp.Spec.Containers[0].Image != "nginx:2" {
		t.Fatalf("target pod labels %v image %s", tp.Labels, tp.Spec.Containers[0].Image)
	}
}

func TestUpdatePodVolumesRewritesTheCopies(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	rp := resolved(src)
	rp.Volumes["conf"] = &provider.VolumeContents{Files: []provider.VolumeFile{{Path: "app.yaml", Data: []byte("v2")}}}
	if err := f.p.UpdatePodVolumes(ctx, rp); err != nil {
		t.Fatal(err)
	}
	cms, _ := f.client.CoreV1().ConfigMaps("shop-east").List(ctx, metav1.ListOptions{})
	if len(cms.Items) != 1 || cms.Items[0].Data["f0"] != "v2" {
		t.Fatalf("ConfigMap copies = %+v", cms.Items)
	}
}

func TestCapacityIsNotifiedWhenTargetNodesChange(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: mustQ("4"), corev1.ResourcePods: mustQ("10")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}}
	f := newFixture(t, node)
	n := &corev1.Node{}
	f.p.ConfigureNode(context.Background(), n)
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Cmp(mustQ("4")) != 0 {
		t.Fatalf("configured cpu = %s", q.String())
	}
	var mu sync.Mutex
	var reported *corev1.Node
	f.p.NotifyNodeStatus(context.Background(), func(n *corev1.Node) { mu.Lock(); reported = n; mu.Unlock() })
	n2 := node.DeepCopy()
	n2.Name = "w2"
	if _, err := f.client.CoreV1().Nodes().Create(context.Background(), n2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("capacity of two nodes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if reported == nil {
			return false
		}
		q := reported.Status.Allocatable[corev1.ResourceCPU]
		return q.Cmp(mustQ("8")) == 0
	})
}

func TestNamespaceDeletedInTheTargetIsMadeAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := sourcePod()
	if err := f.p.CreateResolvedPod(ctx, resolved(src)); err != nil {
		t.Fatal(err)
	}
	// The fake does not cascade: remove everything, then the namespace.
	_ = f.client.CoreV1().Pods("shop-east").Delete(ctx, "web-1", metav1.DeleteOptions{})
	if err := f.client.CoreV1().Namespaces().Delete(ctx, "shop-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.onCreate = func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "shop-east" {
			if _, err := f.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", "shop-east"); err != nil {
				return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "shop-east")
			}
		}
		return false, nil, nil
	}
	f.mu.Unlock()
	other := sourcePod()
	other.Name, other.UID = "web-2", "uid-2"
	// The first create fails if the provider has not yet seen the namespace go
	// (the failure tells it); if it has, it makes the namespace before creating.
	// Either way the retry, as the pod controller makes it, succeeds.
	if err := f.p.CreateResolvedPod(ctx, resolved(other)); err != nil {
		if err := f.p.CreateResolvedPod(ctx, resolved(other)); err != nil {
			t.Fatalf("retry after the namespace was deleted: %v", err)
		}
	}
	if _, err := f.client.CoreV1().Namespaces().Get(ctx, "shop-east", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace not made again: %v", err)
	}
}

func TestANewProviderFindsItsPodsAndOnlyThem(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.p.CreateResolvedPod(ctx, resolved(sourcePod())); err != nil {
		t.Fatal(err)
	}
	// Another virtual node's pod in the same cluster.
	foreign := newMapper(Config{ClusterID: "west", NamespaceStrategy: NamespaceSuffix}, "vk", "").targetPod(sourcePod())
	if _, err := f.client.CoreV1().Pods(foreign.Namespace).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A restarted process: a new provider on the same target, no memory.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2, err := New(cctx, Config{Kubeconfig: "unused", ClusterID: "east"}, "vk", WithClient(f.client),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := p2.GetPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Namespace != "shop" || pods[0].Name != "web-1" || pods[0].UID != "uid-1" {
		t.Fatalf("GetPods after restart = %v", pods)
	}
	// Creating it again (the controller's retry after a lost answer) is a no-op.
	f.client.ClearActions()
	if err := p2.CreateResolvedPod(ctx, resolved(sourcePod())); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "pods" {
			t.Fatalf("pod created twice: %v", a)
		}
	}
}

func TestStatsSummaryRenamesTargetPodsToSourcePods(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.p.CreateResolvedPod(ctx, resolved(sourcePod())); err != nil {
		t.Fatal(err)
	}
	tp, _ := f.client.CoreV1().Pods("shop-east").Get(ctx, "web-1", metav1.GetOptions{})
	tp.Spec.NodeName = "w1"
	if _, err := f.client.CoreV1().Pods("shop-east").Update(ctx, tp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the informer to see the bound pod", func() bool {
		c := f.p.cached("shop", "web-1")
		return c != nil && c.Spec.NodeName == "w1"
	})
	u := func(v uint64) *uint64 { return &v }
	f.p.summaryOf = func(_ context.Context, node string) (*statsv1alpha1.Summary, error) {
		if node != "w1" {
			return nil, fmt.Errorf("unexpected node %s", node)
		}
		return &statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{
			{PodRef: statsv1alpha1.PodReference{Namespace: "shop-east", Name: "web-1", UID: string(tp.UID)},
				CPU:    &statsv1alpha1.CPUStats{UsageNanoCores: u(250)},
				Memory: &statsv1alpha1.MemoryStats{WorkingSetBytes: u(1024)}},
			{PodRef: statsv1alpha1.PodReference{Namespace: "other", Name: "not-ours", UID: "x"},
				CPU: &statsv1alpha1.CPUStats{UsageNanoCores: u(999)}},
		}}, nil
	}
	s, err := f.p.GetStatsSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.NodeName != "vk" || len(s.Pods) != 1 {
		t.Fatalf("summary = %+v", s)
	}
	if ref := s.Pods[0].PodRef; ref.Namespace != "shop" || ref.Name != "web-1" || ref.UID != "uid-1" {
		t.Errorf("pod ref = %+v", ref)
	}
	if *s.Node.CPU.UsageNanoCores != 250 || *s.Node.Memory.WorkingSetBytes != 1024 {
		t.Errorf("node cpu %d memory %d", *s.Node.CPU.UsageNanoCores, *s.Node.Memory.WorkingSetBytes)
	}
}
