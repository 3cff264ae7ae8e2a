package mock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestCreatePodIsPendingUntilStartDelayThenRunning(t *testing.T) {
	p, clk := newTestProvider(t, Config{StartDelay: Duration{Duration: 5 * time.Second}})
	ch := notifications(t, p)
	ctx := context.Background()

	if err := p.CreatePod(ctx, testPod("web", "uid-1")); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	pending := nextNotification(t, ch)
	if pending.Status.Phase != corev1.PodPending {
		t.Fatalf("first notification phase = %s, want Pending", pending.Status.Phase)
	}

	s := mustStatus(t, p, "web")
	if s.Phase != corev1.PodPending || s.PodIP != "" || s.StartTime == nil || s.HostIP != defaultHostIP {
		t.Errorf("pending status = phase %s podIP %q startTime %v hostIP %q", s.Phase, s.PodIP, s.StartTime, s.HostIP)
	}
	if w := s.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Errorf("pending container state = %+v, want Waiting ContainerCreating", s.ContainerStatuses[0].State)
	}
	if c := findCondition(s, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("pending Ready condition = %+v, want False", c)
	}

	waitForWaiter(t, clk)
	clk.Step(5*time.Second - time.Nanosecond)
	if s := mustStatus(t, p, "web"); s.Phase != corev1.PodPending {
		t.Fatalf("phase 1ns before StartDelay = %s, want Pending", s.Phase)
	}
	clk.Step(time.Nanosecond)

	running := nextNotification(t, ch)
	for _, s := range []*corev1.PodStatus{&running.Status, mustStatus(t, p, "web")} {
		checkRunning(t, s, t0.Add(5*time.Second))
	}
	if running.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("qosClass = %q, want it kept from the pod", running.Status.QOSClass)
	}
}

func TestCreatePodWithoutStartDelayRunsAtOnce(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ch := notifications(t, p)
	if err := p.CreatePod(context.Background(), testPod("web", "uid-1")); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	checkRunning(t, mustStatus(t, p, "web"), t0)
	checkRunning(t, &nextNotification(t, ch).Status, t0)
}

func checkRunning(t *testing.T, s *corev1.PodStatus, started time.Time) {
	t.Helper()
	if s.Phase != corev1.PodRunning {
		t.Fatalf("phase = %s, want Running", s.Phase)
	}
	if s.PodIP != "10.244.0.1" || len(s.PodIPs) != 1 || s.HostIP == "" {
		t.Errorf("podIP %q podIPs %v hostIP %q", s.PodIP, s.PodIPs, s.HostIP)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if c := findCondition(s, ct); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}
	if len(s.ContainerStatuses) != 1 {
		t.Fatalf("%d container statuses, want 1", len(s.ContainerStatuses))
	}
	cs := s.ContainerStatuses[0]
	if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(started) {
		t.Errorf("container state = %+v, want Running since %s", cs.State, started)
	}
	if !cs.Ready || !ptr.Deref(cs.Started, false) || cs.RestartCount != 0 {
		t.Errorf("container ready %v started %v restarts %d", cs.Ready, cs.Started, cs.RestartCount)
	}
	if !strings.HasPrefix(cs.ContainerID, "mock://") || cs.ImageID != "mock://busybox:1.36" || cs.Image != "busybox:1.36" {
		t.Errorf("container IDs: containerID %q image %q imageID %q", cs.ContainerID, cs.Image, cs.ImageID)
	}
}

func findCondition(s *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func TestCreatePodSameUIDIsIdempotent(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx := context.Background()
	for range 3 {
		if err := p.CreatePod(ctx, testPod("web", "uid-1")); err != nil {
			t.Fatalf("CreatePod: %v", err)
		}
	}
	if n := p.CreateCount("uid-1"); n != 1 {
		t.Errorf("CreateCount = %d, want 1", n)
	}
	if ip := mustStatus(t, p, "web").PodIP; ip != "10.244.0.1" {
		t.Errorf("podIP = %s, want the first pod's, 10.244.0.1", ip)
	}
}

func TestCreatePodOtherUIDReplaces(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("web", "uid-1")); err != nil {
		t.Fatal(err)
	}
	if err := p.CreatePod(ctx, testPod("web", "uid-2")); err != nil {
		t.Fatal(err)
	}
	pod, err := p.GetPod(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID != "uid-2" || p.CreateCount("uid-1") != 1 || p.CreateCount("uid-2") != 1 {
		t.Errorf("uid %s, counts %d/%d; want uid-2 and 1/1", pod.UID, p.CreateCount("uid-1"), p.CreateCount("uid-2"))
	}
	if pods := p.Pods(); len(pods) != 1 {
		t.Errorf("%d pods, want 1", len(pods))
	}
}

func TestDeletePodStopsAfterStopDelayCappedByGrace(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stopDelay     time.Duration
		specGrace     *int64
		deletionGrace *int64
		want          time.Duration
	}{
		{name: "stop delay, default grace", stopDelay: 10 * time.Second, want: 10 * time.Second},
		{name: "grace shorter than stop delay", stopDelay: 10 * time.Second, specGrace: ptr.To[int64](3), want: 3 * time.Second},
		{name: "deletion grace wins over spec", stopDelay: 10 * time.Second, specGrace: ptr.To[int64](60), deletionGrace: ptr.To[int64](2), want: 2 * time.Second},
		{name: "grace longer than stop delay", stopDelay: 4 * time.Second, specGrace: ptr.To[int64](60), want: 4 * time.Second},
		{name: "no stop delay", want: 0},
		{name: "grace zero", stopDelay: 10 * time.Second, deletionGrace: ptr.To[int64](0), want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, clk := newTestProvider(t, Config{StopDelay: Duration{Duration: tc.stopDelay}})
			ctx := context.Background()
			pod := testPod("web", "uid-1")
			pod.Spec.TerminationGracePeriodSeconds = tc.specGrace
			if err := p.CreatePod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			ch := notifications(t, p)

			deleting := pod.DeepCopy()
			deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			deleting.DeletionGracePeriodSeconds = tc.deletionGrace
			if err := p.DeletePod(ctx, deleting); err != nil {
				t.Fatalf("DeletePod: %v", err)
			}
			if tc.want > 0 {
				clk.Step(tc.want - time.Nanosecond)
				got, err := p.GetPod(ctx, "default", "web")
				if err != nil {
					t.Fatalf("GetPod before the stop: %v", err)
				}
				if got.Status.ContainerStatuses[0].State.Running == nil || got.DeletionTimestamp == nil {
					t.Errorf("before the stop: state %+v deletionTimestamp %v; want running, deleting", got.Status.ContainerStatuses[0].State, got.DeletionTimestamp)
				}
				clk.Step(time.Nanosecond)
			}

			last := nextNotification(t, ch)
			term := last.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || !term.FinishedAt.Time.Equal(t0.Add(tc.want)) {
				t.Fatalf("last notified state = %+v, want Terminated 0 Completed at %s", last.Status.ContainerStatuses[0].State, tc.want)
			}
			if last.Status.Phase != corev1.PodRunning {
				t.Errorf("last notified phase = %s, want Running (kept)", last.Status.Phase)
			}
			if _, err := p.GetPod(ctx, "default", "web"); !errdefs.IsNotFound(err) {
				t.Errorf("GetPod after the stop: %v, want NotFound", err)
			}
			if _, err := p.GetPodStatus(ctx, "default", "web"); !errdefs.IsNotFound(err) {
				t.Errorf("GetPodStatus after the stop: %v, want NotFound", err)
			}
			if pods, _ := p.GetPods(ctx); len(pods) != 0 {
				t.Errorf("GetPods after the stop: %d pods, want 0", len(pods))
			}
		})
	}
}

func TestStoppedPodIsForgottenWithoutNotifier(t *testing.T) {
	p, clk := newTestProvider(t, Config{StopDelay: Duration{Duration: time.Second}})
	ctx := context.Background()
	pod := testPod("web", "uid-1")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	_, err := p.GetPodStatus(ctx, "default", "web")
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "default/web") {
		t.Fatalf("GetPodStatus after the stop: %v, want NotFound naming default/web", err)
	}
	p.mu.Lock()
	n := len(p.pods)
	p.mu.Unlock()
	if n != 0 {
		t.Errorf("%d pods in memory, want 0", n)
	}
	// Creating it again is a new creation.
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := p.CreateCount("uid-1"); n != 2 {
		t.Errorf("CreateCount after re-creation = %d, want 2", n)
	}
}

func TestDeletePodAgainOnlyShortens(t *testing.T) {
	p, clk := newTestProvider(t, Config{StopDelay: Duration{Duration: 10 * time.Second}})
	ctx := context.Background()
	pod := testPod("web", "uid-1")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, pod); err != nil { // stops at 10s
		t.Fatal(err)
	}
	clk.Step(time.Second)
	short := pod.DeepCopy()
	short.DeletionGracePeriodSeconds = ptr.To[int64](2) // stops at 1s + 2s
	if err := p.DeletePod(ctx, short); err != nil {
		t.Fatal(err)
	}
	long := pod.DeepCopy()
	long.DeletionGracePeriodSeconds = ptr.To[int64](60)
	if err := p.DeletePod(ctx, long); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Second)
	if _, err := p.GetPod(ctx, "default", "web"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod 3s in: %v, want NotFound", err)
	}
	if n := p.DeleteCalls("uid-1"); n != 3 {
		t.Errorf("DeleteCalls = %d, want 3", n)
	}
}

func TestUnknownPodIsNotFound(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx := context.Background()
	pod := testPod("ghost", "uid-9")
	for name, err := range map[string]error{
		"DeletePod": p.DeletePod(ctx, pod),
		"UpdatePod": p.UpdatePod(ctx, pod),
		"GetPod": func() error {
			_, err := p.GetPod(ctx, "default", "ghost")
			return err
		}(),
		"GetPodStatus": func() error {
			_, err := p.GetPodStatus(ctx, "default", "ghost")
			return err
		}(),
	} {
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "default/ghost") {
			t.Errorf("%s: %v, want NotFound naming default/ghost", name, err)
		}
	}
	if n := p.DeleteCalls("uid-9"); n != 1 {
		t.Errorf("DeleteCalls = %d, want 1 (NotFound answers count)", n)
	}
}

func TestUpdatePodChangesReportedImage(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ch := notifications(t, p)
	ctx := context.Background()
	pod := testPod("web", "uid-1")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	nextNotification(t, ch)
	updated := pod.DeepCopy()
	updated.Spec.Containers[0].Image = "busybox:1.37"
	if err := p.UpdatePod(ctx, updated); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	for _, s := range []*corev1.PodStatus{&nextNotification(t, ch).Status, mustStatus(t, p, "web")} {
		if img := s.ContainerStatuses[0].Image; img != "busybox:1.37" || s.Phase != corev1.PodRunning {
			t.Errorf("after update: image %s phase %s, want busybox:1.37 Running", img, s.Phase)
		}
	}
	// Another pod of that name is not this one.
	if err := p.UpdatePod(ctx, testPod("web", "uid-2")); !errdefs.IsNotFound(err) {
		t.Errorf("UpdatePod with another UID: %v, want NotFound", err)
	}
}

func TestNotifyGetsCopiesAndIsNotCalledUnderLock(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan *corev1.Pod, 10)
	p.NotifyPods(ctx, func(pod *corev1.Pod) {
		// Each of these takes the provider's lock: called under it, they would hang.
		p.CreateCount(pod.UID)
		if _, err := p.GetPodStatus(ctx, pod.Namespace, pod.Name); err != nil {
			t.Errorf("GetPodStatus in the callback: %v", err)
		}
		pod.Status.Phase = corev1.PodFailed // the callback owns its copy
		pod.Labels = map[string]string{"scribbled": "yes"}
		ch <- pod
	})
	pod := testPod("web", "uid-1")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	first := nextNotification(t, ch)
	if err := p.UpdatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	second := nextNotification(t, ch)
	if first == second {
		t.Error("two notifications shared one object")
	}
	got, err := p.GetPod(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Labels["scribbled"] != "" {
		t.Errorf("the callback's changes leaked into the provider: phase %s labels %v", got.Status.Phase, got.Labels)
	}
	got.Spec.Containers[0].Image = "changed"
	if again, _ := p.GetPod(ctx, "default", "web"); again.Spec.Containers[0].Image != "busybox:1.36" {
		t.Error("GetPod returned an object the provider keeps")
	}
	// The pod passed to UpdatePod is the provider's from then on (provider
	// contract), so changing it afterwards is the caller's mistake: not tested.
}

func TestFailureInjection(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		min, max int // failures out of 1000 calls
	}{
		{rate: 0, min: 0, max: 0},
		{rate: 0.3, min: 250, max: 350},
		{rate: 1, min: 1000, max: 1000},
	} {
		t.Run(fmt.Sprintf("rate=%v", tc.rate), func(t *testing.T) {
			p, _ := newTestProvider(t, Config{FailureRate: tc.rate, Seed: 42})
			ctx := context.Background()
			failures := 0
			for i := range 1000 {
				pod := testPod("web", "uid")
				pod.Name = fmt.Sprintf("pod-%d", i)
				err := p.CreatePod(ctx, pod)
				if err == nil {
					continue
				}
				failures++
				if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "injected failure") {
					t.Fatalf("CreatePod: %v, want an injected Unavailable error", err)
				}
				if _, err := p.GetPod(ctx, pod.Namespace, pod.Name); !errdefs.IsNotFound(err) {
					t.Fatalf("a failed CreatePod left the pod behind: %v", err)
				}
			}
			if failures < tc.min || failures > tc.max {
				t.Errorf("%d failures in 1000 calls at rate %v, want %d..%d", failures, tc.rate, tc.min, tc.max)
			}
		})
	}
}

func TestFailureInjectionIsReproducibleWithSeed(t *testing.T) {
	run := func() []bool {
		p, _ := newTestProvider(t, Config{FailureRate: 0.5, Seed: 7})
		var out []bool
		for range 50 {
			out = append(out, p.UpdatePod(context.Background(), testPod("web", "uid")) == nil)
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d: outcomes differ between two runs with the same seed", i)
		}
	}
}

func TestInitContainers(t *testing.T) {
	p, clk := newTestProvider(t, Config{StartDelay: Duration{Duration: time.Second}})
	pod := testPod("web", "uid-1")
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "busybox"},
		{Name: "proxy", Image: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
	}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	s := mustStatus(t, p, "web")
	if c := findCondition(s, corev1.PodInitialized); c.Status != corev1.ConditionFalse {
		t.Errorf("pending Initialized = %s, want False", c.Status)
	}
	if w := s.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("pending container state = %+v, want Waiting PodInitializing", s.ContainerStatuses[0].State)
	}
	clk.Step(time.Second)
	s = mustStatus(t, p, "web")
	if term := s.InitContainerStatuses[0].State.Terminated; term == nil || term.Reason != "Completed" {
		t.Errorf("init container state = %+v, want Terminated Completed", s.InitContainerStatuses[0].State)
	}
	if sc := s.InitContainerStatuses[1]; sc.State.Running == nil || !sc.Ready {
		t.Errorf("sidecar status = %+v, want Running and ready", sc)
	}
}

func TestHostIP(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-1"},
		{Type: corev1.NodeInternalIP, Address: "192.168.1.5"},
	}}}

	p, _ := newTestProvider(t, Config{})
	p.ConfigureNode(ctx, node.DeepCopy())
	hostNet := testPod("host", "uid-h")
	hostNet.Spec.HostNetwork = true
	for _, pod := range []*corev1.Pod{testPod("web", "uid-1"), hostNet} {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if s := mustStatus(t, p, "web"); s.HostIP != "192.168.1.5" || s.PodIP != "10.244.0.1" {
		t.Errorf("hostIP %s podIP %s, want the node's InternalIP and 10.244.0.1", s.HostIP, s.PodIP)
	}
	if s := mustStatus(t, p, "host"); s.PodIP != "192.168.1.5" {
		t.Errorf("hostNetwork podIP %s, want the hostIP", s.PodIP)
	}

	p, _ = newTestProvider(t, Config{}, WithHostIP("172.16.0.9"))
	p.ConfigureNode(ctx, node.DeepCopy())
	if err := p.CreatePod(ctx, testPod("web", "uid-1")); err != nil {
		t.Fatal(err)
	}
	if s := mustStatus(t, p, "web"); s.HostIP != "172.16.0.9" {
		t.Errorf("hostIP %s, want WithHostIP's", s.HostIP)
	}
}

// The call counts of a pod outlive it by countsKept, then are forgotten: a mock
// node under churn keeps no count of every pod it ever ran.
func TestCountsOfAStoppedPodAreForgottenLater(t *testing.T) {
	p, clk := newTestProvider(t, Config{})
	ctx := context.Background()
	run := func(name string, uid types.UID) {
		t.Helper()
		pod := testPod(name, uid)
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		deleting := pod.DeepCopy()
		deleting.DeletionTimestamp = ptr.To(metav1.NewTime(clk.Now()))
		deleting.DeletionGracePeriodSeconds = ptr.To[int64](0)
		if err := p.DeletePod(ctx, deleting); err != nil {
			t.Fatal(err)
		}
		if _, err := p.GetPod(ctx, "default", name); err == nil { // drops it
			t.Fatalf("pod %s still there after a delete with grace 0", name)
		}
	}
	run("first", "uid-1")
	// A delete of a pod the mock never ran is counted, and forgotten the same way.
	if err := p.DeletePod(ctx, testPod("never", "uid-0")); err == nil {
		t.Fatal("DeletePod of an unknown pod succeeded")
	}
	if n, d := p.CreateCount("uid-1"), p.DeleteCalls("uid-1"); n != 1 || d != 1 {
		t.Fatalf("just stopped: CreateCount %d, DeleteCalls %d; want 1 and 1", n, d)
	}
	clk.Step(countsKept - time.Second)
	run("second", "uid-2")
	if n := p.CreateCount("uid-1"); n != 1 {
		t.Errorf("within countsKept: CreateCount %d, want 1", n)
	}
	clk.Step(2 * time.Second)
	run("third", "uid-3")
	if n, d := p.CreateCount("uid-1"), p.DeleteCalls("uid-1"); n != 0 || d != 0 {
		t.Errorf("after countsKept: CreateCount %d, DeleteCalls %d; want them forgotten", n, d)
	}
	if d := p.DeleteCalls("uid-0"); d != 0 {
		t.Errorf("after countsKept: DeleteCalls of the unknown pod %d; want it forgotten", d)
	}
	if n := p.CreateCount("uid-2"); n != 1 {
		t.Errorf("the second pod's count went with the first's: %d", n)
	}
}

// The mock keeps a record per pod, its resolution inline, and `vkubeletctl
// bench` counts it in the node agent's memory per pod: a field added or moved
// carelessly puts every record in the next size class up.
func TestAPodRecordFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(podRecord{}); got > 144 {
		t.Errorf("a podRecord takes %d bytes, more than its 144-byte size class", got)
	}
}
