package cri

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// fakeRuntime is a runtime with one ready sandbox running one container. It
// answers PodSandboxStatus only in a context marked by answering, and holds the
// others until their context ends: so a pod's goroutine never gets past its
// first read, and what the provider reports is what it knew before its
// goroutines ran. The methods it does not define panic (nil embedded
// interface).
type fakeRuntime struct {
	runtimeapi.RuntimeServiceClient
	sandbox   *runtimeapi.PodSandbox
	container *runtimeapi.ContainerStatus
}

// answering marks a context in which fakeRuntime answers PodSandboxStatus.
type answering struct{}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{f.sandbox}}, nil
}

func (f *fakeRuntime) PodSandboxStatus(ctx context.Context, _ *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	if ctx.Value(answering{}) == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{
		Id: f.sandbox.Id, Metadata: f.sandbox.Metadata, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: f.sandbox.CreatedAt, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.88.0.7"},
	}}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	c := f.container
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{
		Id: c.Id, PodSandboxId: f.sandbox.Id, Metadata: c.Metadata, State: c.State, CreatedAt: c.CreatedAt,
	}}}, nil
}

func (f *fakeRuntime) ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest, ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: f.container}, nil
}

// A pod taken over after a restart reports what the runtime runs from the
// start, before its goroutine's first sync: the pod controller reads every
// status at once after its start-up reconcile, and writes what it gets. Before,
// a pod running before the restart was reported as just accepted (Pending,
// every container ContainerCreating) until its first sync, and that was
// written over the Running the API had.
func TestAPodTakenOverReportsWhatTheRuntimeRunsFromTheStart(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default", UID: "uid-survivor", CreationTimestamp: metav1.Unix(1000, 0)},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1"}}},
	}
	created := time.Now().Add(-time.Minute).UnixNano()
	rt := &fakeRuntime{
		sandbox: &runtimeapi.PodSandbox{Id: "sb-1", State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: created,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)}},
		container: &runtimeapi.ContainerStatus{Id: "ctr-1", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"}, CreatedAt: created, StartedAt: created + int64(time.Second),
			ImageRef: "sha256:0123"},
	}
	cfg := Config{RootDir: t.TempDir()}.withDefaults()
	p := &Provider{
		nodeName: "n", cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), hostIP: "192.0.2.1",
		backoffs: flowcontrol.NewBackOff(cfg.BackoffBase.Duration, cfg.BackoffMax.Duration),
		pods:     map[string]*podRecord{}, cpuSamples: map[string]cpuSample{}, runtime: rt,
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { p.cancel(); p.wg.Wait() })
	if err := p.savePod(&provider.ResolvedPod{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if err := p.recover(context.WithValue(context.Background(), answering{}, true)); err != nil {
		t.Fatal(err)
	}

	st, err := p.GetPodStatus(context.Background(), pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.ContainerStatuses[0]
	if st.Phase != corev1.PodRunning || cs.State.Running == nil || cs.ContainerID != containerIDPrefix+"ctr-1" || !cs.Ready ||
		condition(st, corev1.PodReady) != corev1.ConditionTrue || st.PodIP != "10.88.0.7" {
		t.Fatalf("status of the pod taken over: %s", describe(st))
	}
}

// The init containers of a pod taken over are done as startContainers would
// find them: each exited 0 in the current sandbox, a sidecar running.
func TestInitContainersDoneAsTheRuntimeShowsThem(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
		Containers:     []corev1.Container{{Name: "main"}},
	}}
	state := func(s runtimeapi.ContainerState, code int32) *ctrState {
		return &ctrState{cur: &runtimeapi.ContainerStatus{State: s, ExitCode: code}}
	}
	exited, running := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING
	cases := []struct {
		name         string
		setup, proxy *ctrState
		want         bool
	}{
		{"done", state(exited, 0), state(running, 0), true},
		{"setup never ran", nil, nil, false},
		{"setup running", state(running, 0), nil, false},
		{"setup failed", state(exited, 1), state(running, 0), false},
		{"sidecar exited", state(exited, 0), state(exited, 0), false},
		{"setup ran in an earlier sandbox", &ctrState{cur: &runtimeapi.ContainerStatus{State: exited}, stale: true}, state(running, 0), false},
	}
	for _, c := range cases {
		rec := &podRecord{ctrs: map[string]*ctrState{}}
		if c.setup != nil {
			rec.ctrs["setup"] = c.setup
		}
		if c.proxy != nil {
			rec.ctrs["proxy"] = c.proxy
		}
		if got := initContainersDone(rec, pod); got != c.want {
			t.Errorf("%s: initContainersDone = %v, want %v", c.name, got, c.want)
		}
	}
	if !initContainersDone(&podRecord{}, &corev1.Pod{}) {
		t.Error("a pod without init containers is not initialized")
	}
}
