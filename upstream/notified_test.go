package upstream

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	vkerrdefs "github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// With StatusFromNotifications, a notifying provider that cannot read its pods
// back (interLink's answers GetPod and GetPodStatus with an error) is answered
// for by its last notification, from the first one until a while after the pod's deletion;
// NotFound stays NotFound, and a provider that does not notify has no stand-in.
func TestANotifyingProvidersLastNotificationAnswersWhenItCannotRead(t *testing.T) {
	ctx := context.Background()
	h, f, now := cannotRead(t)

	pod := testPod("a")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	if err := h.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := h.GetPodStatus(ctx, "ns", "a"); err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("before any notification: %v, want the provider's error", err)
	}
	running := pod.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	f.notify(running)
	st, err := h.GetPodStatus(ctx, "ns", "a")
	if err != nil || st.Phase != corev1.PodRunning {
		t.Fatalf("after a Running notification: %v, %v; want Running", st, err)
	}
	if p, err := h.GetPod(ctx, "ns", "a"); err != nil || p.Status.Phase != corev1.PodRunning || p == running {
		t.Fatalf("GetPod after a Running notification: %v; want a copy, Running", err)
	}

	// Deleted: the terminal notification answers while vkubelet waits for it.
	if err := h.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stopped := running.DeepCopy()
	stopped.Status.Phase = corev1.PodSucceeded
	f.notify(stopped)
	*now = now.Add(30 * time.Second)
	if st, err := h.GetPodStatus(ctx, "ns", "a"); err != nil || st.Phase != corev1.PodSucceeded {
		t.Fatalf("a deleted pod's terminal notification: %v, %v; want Succeeded", st, err)
	}
	// Long after its grace period, the next deletion sweeps it away.
	*now = now.Add(2 * time.Minute)
	other := testPod("b")
	if err := h.DeletePod(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := h.GetPodStatus(ctx, "ns", "a"); err == nil {
		t.Fatal("a pod deleted long ago still answered for")
	}

	// The provider's NotFound is the answer, notification or not.
	f.notify(running)
	f.readErr = vkerrdefs.NotFound("gone")
	if _, err := h.GetPodStatus(ctx, "ns", "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("the provider's NotFound: %v", err)
	}

	// A provider that does not notify has nothing to stand in.
	plain := newFake()
	plain.readErr = errors.New("NOT IMPLEMENTED")
	if _, err := wrap(t, plain, nil, Config{StatusFromNotifications: true}).GetPodStatus(ctx, "ns", "a"); err == nil {
		t.Fatal("a provider that does not notify: its error hidden")
	}
	// Unless asked for, nothing is kept: a provider that can read its pods
	// back pays no copy of each.
	nf := &notifyingFake{fakeProvider: newFake()}
	nf.readErr = errors.New("NOT IMPLEMENTED")
	h = wrap(t, nf, nil, Config{})
	h.(provider.PodNotifier).NotifyPods(ctx, func(*corev1.Pod) {})
	nf.notify(running)
	if _, err := h.GetPodStatus(ctx, "ns", "a"); err == nil {
		t.Fatal("without StatusFromNotifications, a notification answered for the provider")
	}
}

// cannotRead is a notifying fake whose GetPod and GetPodStatus fail, wrapped
// with StatusFromNotifications on a clock that reads *now.
func cannotRead(t *testing.T) (provider.PodLifecycleHandler, *notifyingFake, *time.Time) {
	t.Helper()
	f := &notifyingFake{fakeProvider: newFake()}
	f.readErr = errors.New("NOT IMPLEMENTED")
	now := time.Unix(1000, 0)
	h, err := Wrap(Config{StatusFromNotifications: true}, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.(notifyingAdapter).now = func() time.Time { return now }
	h.(provider.PodNotifier).NotifyPods(context.Background(), func(*corev1.Pod) {})
	return h, f, &now
}

// A pod deleted in a notifying provider that cannot read its pods, whose last
// notification never showed a container running or ended (no container
// statuses), or that was never notified at all, is answered for as gone once
// its grace period and forgetAfter are over: upstream took a DeletePod that
// succeeded as the pod deleted, and vkubelet, which waits for the stop, would
// wait for good. A pod last notified running may still run: it is not.
func TestADeletedPodANotifyingProviderCannotReadGoesOnceItsTimeIsUp(t *testing.T) {
	ctx := context.Background()
	h, f, now := cannotRead(t)

	pending, silent, running := testPod("pending"), testPod("silent"), testPod("running")
	for _, p := range []*corev1.Pod{pending, silent, running} {
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		if err := h.CreatePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	notice := pending.DeepCopy()
	notice.Status.Phase = corev1.PodPending
	f.notify(notice)
	notice = running.DeepCopy()
	notice.Status.Phase = corev1.PodRunning
	notice.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f.notify(notice)
	for _, p := range []*corev1.Pod{pending, silent, running} {
		if err := h.DeletePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	*now = now.Add(30*time.Second + forgetAfter - time.Second)
	if st, err := h.GetPodStatus(ctx, "ns", "pending"); err != nil || st.Phase != corev1.PodPending {
		t.Fatalf("within its time: %v, %v; want the last notification", st, err)
	}
	if _, err := h.GetPodStatus(ctx, "ns", "silent"); err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("a pod never notified, within its time: %v; want the provider's error", err)
	}
	*now = now.Add(time.Second)
	for _, name := range []string{"pending", "silent"} {
		if _, err := h.GetPodStatus(ctx, "ns", name); !errdefs.IsNotFound(err) {
			t.Errorf("%s once its time is up: %v, want NotFound", name, err)
		}
		if _, err := h.GetPod(ctx, "ns", name); !errdefs.IsNotFound(err) {
			t.Errorf("GetPod of %s once its time is up: %v, want NotFound", name, err)
		}
	}
	if st, err := h.GetPodStatus(ctx, "ns", "running"); err != nil || st.Phase != corev1.PodRunning {
		t.Errorf("a pod last notified running, once its time is up: %v, %v; want its last notification", st, err)
	}
	// Still gone well after, through another deletion's sweep.
	*now = now.Add(goneFor - time.Second)
	if err := h.DeletePod(ctx, testPod("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.GetPodStatus(ctx, "ns", "silent"); !errdefs.IsNotFound(err) {
		t.Errorf("silent, %s later: %v, want NotFound", goneFor, err)
	}
	// A new pod of the name is the provider's to answer for again.
	if err := h.CreatePod(ctx, testPod("pending")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.GetPodStatus(ctx, "ns", "pending"); err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("a new pod of the name: %v, want the provider's error", err)
	}
}

// A provider that cannot read its pods is still asked for a container's logs,
// as upstream's node asked it; a pod it says it lacks is NotFound before.
func TestStreamsAreAskedOfAProviderThatCannotReadItsPods(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.readErr = errors.New("NOT IMPLEMENTED")
	h := wrap(t, f, nil, Config{}).(provider.ContainerLogsProvider)
	rc, err := h.GetContainerLogs(ctx, "ns", "a", "main", provider.ContainerLogOpts{})
	if err != nil {
		t.Fatalf("logs of a provider that cannot read its pods: %v", err)
	}
	rc.Close()
	f.readErr = vkerrdefs.NotFound("no such pod")
	if _, err := h.GetContainerLogs(ctx, "ns", "a", "main", provider.ContainerLogOpts{}); !errdefs.IsNotFound(err) {
		t.Fatalf("logs of a pod the provider lacks: %v, want NotFound", err)
	}
}

// routesFake is a pod handler alone, as a main drives it through upstream's
// node package without nodeutil.
type routesFake struct{ *fakeProvider }

// A provider driven without nodeutil (a pod handler, a Node, the routes its
// main attached) is adapted: its routes serve the kubelet API, an absent
// route is NotImplemented, its Node configures vkubelet's, and only a
// notifying handler makes a PodNotifier.
func TestWrapControllerUsesTheMainsHandlerNodeAndRoutes(t *testing.T) {
	ctx := context.Background()
	f := fakeWith(testPod("a"))
	var asked string
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"type": "virtual-kubelet"}}}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000")}
	h, err := WrapController(Config{}, Controller{
		Pods: routesFake{f},
		Node: n,
		Routes: api.PodHandlerConfig{
			GetContainerLogs: func(_ context.Context, ns, pod, container string, _ api.ContainerLogOpts) (io.ReadCloser, error) {
				asked = ns + "/" + pod + "/" + container
				return f.GetContainerLogs(ctx, ns, pod, container, api.ContainerLogOpts{})
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.(provider.PodNotifier); ok {
		t.Error("a handler without NotifyPods adapted as a PodNotifier")
	}
	rc, err := h.(provider.ContainerLogsProvider).GetContainerLogs(ctx, "ns", "a", "main", provider.ContainerLogOpts{})
	if err != nil || asked != "ns/a/main" {
		t.Fatalf("logs: %v, route asked for %q", err, asked)
	}
	rc.Close()
	err = h.(provider.ContainerExecProvider).RunInContainer(ctx, "ns", "a", "main", []string{"true"}, &testIO{})
	if !errdefs.IsNotImplemented(err) {
		t.Errorf("exec without a route: %v, want NotImplemented", err)
	}
	if _, err := h.(provider.StatsProvider).GetStatsSummary(ctx); !errdefs.IsNotImplemented(err) {
		t.Errorf("stats without a route: %v, want NotImplemented", err)
	}
	var ours corev1.Node
	h.(provider.NodeConfigurer).ConfigureNode(ctx, &ours)
	if ours.Labels["type"] != "virtual-kubelet" || ours.Status.Capacity.Pods().Value() != 1000 {
		t.Errorf("configured node: labels %v, capacity %v; want the main's Node's", ours.Labels, ours.Status.Capacity)
	}

	nf := &notifyingFake{fakeProvider: newFake()}
	h, err = WrapController(Config{}, Controller{Pods: nf})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *corev1.Pod, 1)
	h.(provider.PodNotifier).NotifyPods(ctx, func(p *corev1.Pod) { got <- p })
	nf.notify(testPod("b"))
	if p := <-got; p.Name != "b" {
		t.Errorf("notified %s, want b", p.Name)
	}
	if _, err := WrapController(Config{}, Controller{}); err == nil {
		t.Error("a Controller without a pod handler accepted")
	}
}
