package bench

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/cri"
)

// fakeRuntime is a CRI server that records the first sandbox and container
// configurations it is asked for, and has every image.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	mu        sync.Mutex
	sandbox   *runtimeapi.PodSandboxConfig
	container *runtimeapi.ContainerConfig
	created   chan struct{}
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (f *fakeRuntime) RunPodSandbox(_ context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandbox == nil {
		f.sandbox = r.Config
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"}, nil
}

func (f *fakeRuntime) PodSandboxStatus(context.Context, *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.0.7"}}}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, nil
}

func (f *fakeRuntime) CreateContainer(_ context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.container == nil {
		f.container = r.Config
		close(f.created)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: "c"}, nil
}

func (f *fakeRuntime) StartContainer(context.Context, *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *fakeRuntime) ImageStatus(_ context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "img", RepoTags: []string{r.Image.Image}}}, nil
}

// providerConfigs runs pod through the CRI provider on a fake runtime and
// returns the sandbox and container it asked for.
func providerConfigs(t *testing.T, rp *provider.ResolvedPod, node, resolvConf string) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRuntime{created: make(chan struct{})}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, fake)
	runtimeapi.RegisterImageServiceServer(srv, fake)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	p, err := cri.New(context.Background(), cri.Config{RuntimeEndpoint: sock, RootDir: t.TempDir(), ResolvConf: resolvConf}, node)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.CreateResolvedPod(context.Background(), rp); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fake.created:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider created no container in 30 s")
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	return fake.sandbox, fake.container
}

// The raw path asks the runtime for the sandbox and container the CRI provider
// asks for the same pod, but for what lives on the node's disk (log directory,
// the host side of mounts) and the node label, which names the path.
func TestRawCRIConfigsAreTheProviders(t *testing.T) {
	resolvConf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolvConf, []byte("nameserver 10.0.0.2\nsearch example.org\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := &podTemplate{shape: ShapeDeployment, image: "127.0.0.1:5000/busybox:1", command: []string{"sleep", "3600"}}
	raw := &rawCRI{token: []byte("a.b.c"), caPEM: []byte("ca"), namespace: []byte("ns")}
	pod := raw.admitted(tmpl.pod(tmpl.name(7), "n"))
	pod.Namespace, pod.UID = "ns", uuid.NewUUID()
	c := &pod.Spec.Containers[0]
	rp := &provider.ResolvedPod{Pod: pod, Env: map[string][]corev1.EnvVar{c.Name: c.Env}}
	wantSB, wantCtr := providerConfigs(t, rp, "n", resolvConf)

	dns, err := cri.NodeDNSConfig(resolvConf)
	if err != nil {
		t.Fatal(err)
	}
	sb := rawSandboxConfig(pod, "raw-node", "/raw/logs", dns)
	mounts := []*runtimeapi.Mount{
		{ContainerPath: tokenMountPath, HostPath: "/raw/token", Readonly: true},
		{ContainerPath: "/etc/hosts", HostPath: "/raw/hosts"},
		{ContainerPath: "/dev/termination-log", HostPath: "/raw/term"},
	}
	ctr := rawContainerConfig(pod, c, "raw-node", mounts)

	if sb.Labels["vkubelet.io/node"] != "raw-node" || ctr.Labels["vkubelet.io/node"] != "raw-node" {
		t.Errorf("node labels %q, %q; want raw-node", sb.Labels["vkubelet.io/node"], ctr.Labels["vkubelet.io/node"])
	}
	sb.Labels["vkubelet.io/node"], ctr.Labels["vkubelet.io/node"] = "n", "n"
	sb.LogDirectory = wantSB.LogDirectory
	for i, m := range ctr.Mounts {
		if i < len(wantCtr.Mounts) {
			m.HostPath = wantCtr.Mounts[i].HostPath
		}
	}
	if !reflect.DeepEqual(sb.String(), wantSB.String()) {
		t.Errorf("sandbox:\n%s\nthe provider's:\n%s", sb, wantSB)
	}
	if !reflect.DeepEqual(ctr.String(), wantCtr.String()) {
		t.Errorf("container:\n%s\nthe provider's:\n%s", ctr, wantCtr)
	}
}

func TestAdmittedPodMountsTheTokenOnlyWithOne(t *testing.T) {
	tmpl := &podTemplate{shape: ShapeDeployment}
	with := (&rawCRI{token: []byte("t")}).admitted(tmpl.pod("p", ""))
	if len(tokenSources(with)) != 1 {
		t.Fatalf("volumes %+v: want one token projection", with.Spec.Volumes)
	}
	if m := with.Spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != tokenMountPath || !m[0].ReadOnly {
		t.Fatalf("mounts %+v: want the token volume read-only at %s", m, tokenMountPath)
	}
	without := (&rawCRI{}).admitted(tmpl.pod("p", ""))
	if len(without.Spec.Volumes) != 0 || len(without.Spec.Containers[0].VolumeMounts) != 0 {
		t.Fatalf("without a token: volumes %+v, mounts %+v", without.Spec.Volumes, without.Spec.Containers[0].VolumeMounts)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := percentile(d, 50), percentile(d, 99); p50 != 50 || p99 != 99 {
		t.Fatalf("p50, p99 of 1..100 ms = %v, %v; want 50, 99", p50, p99)
	}
	if !sort.SliceIsSorted(d, func(i, j int) bool { return d[i] > d[j] }) {
		t.Fatal("percentile reordered its argument")
	}
	if percentile(nil, 50) != 0 {
		t.Fatal("percentile of nothing is not 0")
	}
}

func TestFiguresOfAPath(t *testing.T) {
	f := figures(4, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}, 2*time.Second)
	if f.PodsPerS != 2 || f.Seconds != 2 || f.P50ms != 2000 || f.P99ms != 3000 {
		t.Fatalf("figures = %+v", f)
	}
}

func TestMedianCRITakesEachFigureSeparately(t *testing.T) {
	runs := []*CRIResult{
		{Pods: 100, Raw: PathFigures{PodsPerS: 30, P99ms: 900}, Vkubelet: PathFigures{PodsPerS: 20, P50ms: 10}, Overhead: 0.5, P99Overhead: 0.1, LoadAverage: 1},
		{Pods: 100, Raw: PathFigures{PodsPerS: 10, P99ms: 100}, Vkubelet: PathFigures{PodsPerS: 25, P50ms: 30}, Overhead: -0.1, P99Overhead: 0.3, LoadAverage: 3},
		{Pods: 100, Raw: PathFigures{PodsPerS: 20, P99ms: 500}, Vkubelet: PathFigures{PodsPerS: 22, P50ms: 20}, Overhead: 0.2, P99Overhead: 0.2, LoadAverage: 2},
	}
	m := MedianCRI(runs)
	if m.Raw.PodsPerS != 20 || m.Raw.P99ms != 500 || m.Vkubelet.PodsPerS != 22 || m.Vkubelet.P50ms != 20 {
		t.Fatalf("medians raw %+v, vkubelet %+v", m.Raw, m.Vkubelet)
	}
	if m.Overhead != 0.2 || m.P99Overhead != 0.2 || m.LoadAverage != 2 || m.Pods != 100 || len(m.Runs) != 3 {
		t.Fatalf("median = %+v", m)
	}
	if MedianCRI(runs[:1]) != runs[0] {
		t.Fatal("the median of one run is not that run")
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct{ a, b, want float64 }{{12, 10, 0.2}, {8, 10, -0.2}, {5, 0, 0}} {
		if got := ratio(tc.a, tc.b); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("ratio(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
