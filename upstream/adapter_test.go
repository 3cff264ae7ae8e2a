package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	vkerrdefs "github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	utilexec "k8s.io/utils/exec"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
)

func wrap(t *testing.T, p nodeutil.Provider, np node.NodeProvider, cfg Config) provider.PodLifecycleHandler {
	t.Helper()
	a, err := Wrap(cfg, p, np)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}

func TestUpstreamErrorsBecomeVkubeletClasses(t *testing.T) {
	ours := errdefs.Unavailable("back end away")
	for _, tc := range []struct {
		name  string
		err   error
		class error // nil: unclassified
	}{
		{"NotFound", vkerrdefs.NotFound("no pod"), errdefs.ErrNotFound},
		{"NotFoundf", vkerrdefs.NotFoundf("no pod %s", "ns/a"), errdefs.ErrNotFound},
		{"AsNotFound", vkerrdefs.AsNotFound(errors.New("gone")), errdefs.ErrNotFound},
		{"NotFound wrapped with %w", fmt.Errorf("looking: %w", vkerrdefs.NotFound("no pod")), errdefs.ErrNotFound},
		{"NotFound as the Cause of pkg/errors' kind", causeOnly{vkerrdefs.NotFound("no pod")}, errdefs.ErrNotFound},
		{"InvalidInput", vkerrdefs.InvalidInput("bad"), errdefs.ErrInvalidInput},
		{"InvalidInputf wrapped", fmt.Errorf("create: %w", vkerrdefs.InvalidInputf("bad %d", 1)), errdefs.ErrInvalidInput},
		{"the API's NotFound", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a"), errdefs.ErrNotFound},
		{"the API's BadRequest", apierrors.NewBadRequest("no"), errdefs.ErrInvalidInput},
		{"already vkubelet's", ours, errdefs.ErrUnavailable},
		{"unclassified", errors.New("boom"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.err = tc.err
			err := wrap(t, f, nil, Config{}).CreatePod(context.Background(), testPod("a"))
			if !errors.Is(err, tc.err) {
				t.Errorf("the upstream error is not kept as the cause: %v", err)
			}
			for _, class := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidInput, errdefs.ErrNotImplemented, errdefs.ErrUnavailable} {
				if got, want := errors.Is(err, class), class == tc.class; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, class, got, want)
				}
			}
			if !strings.Contains(err.Error(), "ns/a") {
				t.Errorf("error does not name the pod: %v", err)
			}
		})
	}
}

func TestAPodAnsweredNilIsNotFound(t *testing.T) {
	f := newFake()
	f.nilPods = true
	a := wrap(t, f, nil, Config{})
	if _, err := a.GetPod(context.Background(), "ns", "a"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod: %v, want NotFound", err)
	}
	if _, err := a.GetPodStatus(context.Background(), "ns", "a"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPodStatus: %v, want NotFound", err)
	}
}

func TestPodsReturnedAreCopies(t *testing.T) {
	f := newFake()
	a := wrap(t, f, nil, Config{})
	ctx := context.Background()
	if err := a.CreatePod(ctx, testPod("a")); err != nil {
		t.Fatal(err)
	}
	got, err := a.GetPod(ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	got.Labels = map[string]string{"changed": "by the caller"}
	pods, _ := a.GetPods(ctx)
	pods[0].Status.Phase = corev1.PodFailed
	if p := f.pods["ns/a"]; p.Labels != nil || p.Status.Phase != "" {
		t.Errorf("the caller's changes reached the provider's pod: %+v", p.ObjectMeta)
	}
}

func TestAnUpdateWithoutAStatusCarriesTheProviders(t *testing.T) {
	running := testPod("a")
	running.Status.Phase = corev1.PodRunning
	f := fakeWith(running)
	update := testPod("a")
	update.Labels = map[string]string{"changed": "yes"}
	if err := wrap(t, f, nil, Config{}).UpdatePod(context.Background(), update); err != nil {
		t.Fatal(err)
	}
	if got := f.pods["ns/a"]; got.Labels["changed"] != "yes" || got.Status.Phase != corev1.PodRunning {
		t.Errorf("the provider keeps labels %v, phase %q; want the update's labels and its own status", got.Labels, got.Status.Phase)
	}
}

func TestTheResolvedEnvironmentReachesTheProviderInEnv(t *testing.T) {
	f := newFake()
	a := wrap(t, f, nil, Config{}).(provider.ResolvedPodHandler)
	pod := testPod("a")
	pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FROM", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	shared := []corev1.EnvVar{{Name: "FROM", Value: "a"}, {Name: "KEY", Value: "from the ConfigMap"}}
	rp := &provider.ResolvedPod{Pod: pod, Env: map[string][]corev1.EnvVar{"main": shared, "init": {{Name: "I", Value: "1"}}}}
	if err := a.CreateResolvedPod(context.Background(), rp); err != nil {
		t.Fatal(err)
	}
	got := f.created[0]
	if c := got.Spec.Containers[0]; c.EnvFrom != nil || len(c.Env) != 2 || c.Env[0].Value != "a" || c.Env[0].ValueFrom != nil || c.Env[1].Value != "from the ConfigMap" {
		t.Errorf("main's env = %+v, envFrom = %+v", c.Env, c.EnvFrom)
	}
	if c := got.Spec.InitContainers[0]; len(c.Env) != 1 || c.Env[0].Value != "1" {
		t.Errorf("init's env = %+v", c.Env)
	}
	got.Spec.Containers[0].Env[0].Value = "changed by the provider"
	if shared[0].Value != "a" {
		t.Error("the provider's change reached the resolution's shared environment")
	}
}

func TestLogOptionsBecomeUpstreams(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	since := now.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		in   provider.ContainerLogOpts
		want api.ContainerLogOpts
	}{
		{"none", provider.ContainerLogOpts{}, api.ContainerLogOpts{}},
		{"tail, limit, timestamps, follow, previous",
			provider.ContainerLogOpts{Tail: 5, TailSet: true, LimitBytes: 100, Timestamps: true, Follow: true, Previous: true},
			api.ContainerLogOpts{Tail: 5, LimitBytes: 100, Timestamps: true, Follow: true, Previous: true}},
		{"sinceSeconds", provider.ContainerLogOpts{SinceSeconds: 30}, api.ContainerLogOpts{SinceSeconds: 30}},
		{"sinceTime", provider.ContainerLogOpts{SinceTime: &since}, api.ContainerLogOpts{SinceTime: since}},
		{"tailLines=0: lines from now on", provider.ContainerLogOpts{TailSet: true, Follow: true, SinceSeconds: 30},
			api.ContainerLogOpts{Follow: true, SinceTime: now}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeWith(testPod("a"))
			a := wrap(t, f, nil, Config{}).(provider.ContainerLogsProvider)
			a.(*Adapter).now = func() time.Time { return now }
			rc, err := a.GetContainerLogs(context.Background(), "ns", "a", "main", tc.in)
			if err != nil {
				t.Fatal(err)
			}
			rc.Close()
			if f.logOpts != tc.want {
				t.Errorf("upstream got %+v, want %+v", f.logOpts, tc.want)
			}
		})
	}
}

// Upstream's mock answers logs and exec for any name; vkubelet's callers expect
// NotFound for a pod or container that is not there.
func TestStreamsOfAContainerThePodLacksAreNotFound(t *testing.T) {
	f := fakeWith(testPod("a"))
	f.exec = func([]string, api.AttachIO) error { return nil }
	a := wrap(t, f, nil, Config{}).(*Adapter)
	ctx := context.Background()
	for _, tc := range []struct{ pod, container string }{{"a", "x"}, {"b", "main"}} {
		if _, err := a.GetContainerLogs(ctx, "ns", tc.pod, tc.container, provider.ContainerLogOpts{}); !errdefs.IsNotFound(err) {
			t.Errorf("logs of %s/%s: %v, want NotFound", tc.pod, tc.container, err)
		}
		if err := a.RunInContainer(ctx, "ns", tc.pod, tc.container, []string{"true"}, &testIO{}); !errdefs.IsNotFound(err) {
			t.Errorf("exec in %s/%s: %v, want NotFound", tc.pod, tc.container, err)
		}
		if err := a.AttachToContainer(ctx, "ns", tc.pod, tc.container, &testIO{}); !errdefs.IsNotFound(err) {
			t.Errorf("attach to %s/%s: %v, want NotFound", tc.pod, tc.container, err)
		}
	}
}

func TestExecStreamsReachTheProviderAndItsExitCodeComesBack(t *testing.T) {
	f := fakeWith(testPod("a"))
	resized := make(chan api.TermSize, 1)
	f.exec = func(cmd []string, io api.AttachIO) error {
		if io.Stderr() != nil {
			t.Error("stderr asked for with a terminal")
		}
		in, _ := readAll(io.Stdin())
		fmt.Fprintf(io.Stdout(), "%s: %s", strings.Join(cmd, " "), in)
		resized <- <-io.Resize()
		return utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3}
	}
	a := wrap(t, f, nil, Config{}).(provider.ContainerExecProvider)
	tio := &testIO{stdin: strings.NewReader("typed"), stdout: &closeBuffer{}, tty: true, resize: make(chan provider.TermSize, 1)}
	tio.resize <- provider.TermSize{Width: 80, Height: 24}
	err := a.RunInContainer(context.Background(), "ns", "a", "main", []string{"sh", "-c", "exit 3"}, tio)
	var exit *provider.ExecError
	if !errors.As(err, &exit) || exit.ExitCode != 3 {
		t.Errorf("RunInContainer: %v, want exit code 3", err)
	}
	if got := tio.stdout.String(); got != "sh -c exit 3: typed" {
		t.Errorf("stdout: %q", got)
	}
	if got := <-resized; got != (api.TermSize{Width: 80, Height: 24}) {
		t.Errorf("terminal size: %+v", got)
	}
}

func TestAnExecThatSucceedsOrFailsToRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"exit 0", nil, func(err error) bool { return err == nil }},
		{"the provider's NotFound", vkerrdefs.NotFound("no container main"), errdefs.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeWith(testPod("a"))
			f.exec = func([]string, api.AttachIO) error { return tc.err }
			err := wrap(t, f, nil, Config{}).(provider.ContainerExecProvider).RunInContainer(context.Background(), "ns", "a", "main", []string{"true"}, &testIO{stdout: &closeBuffer{}})
			if !tc.check(err) {
				t.Errorf("RunInContainer: %v", err)
			}
		})
	}
}

func TestAttachStreamsReachTheProvider(t *testing.T) {
	f := fakeWith(testPod("a"))
	f.exec = func(_ []string, io api.AttachIO) error {
		if io.TTY() || io.Resize() != nil || io.Stdin() != nil {
			t.Errorf("tty %v, resize %v, stdin %v: none was asked for", io.TTY(), io.Resize(), io.Stdin())
		}
		fmt.Fprint(io.Stdout(), "out")
		fmt.Fprint(io.Stderr(), "err")
		return nil
	}
	tio := &testIO{stdout: &closeBuffer{}, stderr: &closeBuffer{}}
	if err := wrap(t, f, nil, Config{}).(provider.ContainerAttachProvider).AttachToContainer(context.Background(), "ns", "a", "main", tio); err != nil {
		t.Fatal(err)
	}
	if tio.stdout.String() != "out" || tio.stderr.String() != "err" {
		t.Errorf("stdout %q, stderr %q", tio.stdout.String(), tio.stderr.String())
	}
}

func TestOnlyANotifyingProviderIsAPodNotifier(t *testing.T) {
	if _, ok := wrap(t, newFake(), nil, Config{}).(provider.PodNotifier); ok {
		t.Error("a provider without NotifyPods adapted as a PodNotifier: its pods would never be polled")
	}
	f := &notifyingFake{fakeProvider: newFake()}
	a, ok := wrap(t, f, nil, Config{}).(provider.PodNotifier)
	if !ok {
		t.Fatal("a node.PodNotifier not adapted as a PodNotifier")
	}
	got := make(chan *corev1.Pod, 1)
	a.NotifyPods(context.Background(), func(p *corev1.Pod) { got <- p })
	sent := testPod("a")
	sent.Status.Phase = corev1.PodRunning
	f.notify(sent)
	p := eventually.Receive(t, got, time.Second, "the notified pod")
	if p == sent || p.Status.Phase != corev1.PodRunning {
		t.Errorf("notified %p (sent %p), phase %s: want a copy, Running", p, sent, p.Status.Phase)
	}
}

func TestTheNodeProviderIsPingedAndNotifies(t *testing.T) {
	np := &fakeNode{pingErr: errors.New("back end down")}
	a := wrap(t, newFake(), np, Config{}).(provider.NodeProvider)
	if err := a.Ping(context.Background()); err == nil {
		t.Error("Ping succeeded with the back end down")
	}
	got := make(chan *corev1.Node, 1)
	a.NotifyNodeStatus(context.Background(), func(n *corev1.Node) { got <- n })
	np.notify(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	eventually.Receive(t, got, time.Second, "the node's status")

	// Without a NodeProvider the node is healthy, as upstream's NaiveNodeProvider.
	if err := wrap(t, newFake(), nil, Config{}).(provider.NodeProvider).Ping(context.Background()); err != nil {
		t.Errorf("Ping without a NodeProvider: %v", err)
	}
}

func TestSerializedCallsNeverOverlap(t *testing.T) {
	for _, serialize := range []bool{true, false} {
		t.Run(fmt.Sprintf("serialize=%v", serialize), func(t *testing.T) {
			f := newFake()
			f.onCreate = func(*corev1.Pod) {
				time.Sleep(10 * time.Millisecond) // holds the call open while others arrive
			}
			a := wrap(t, f, nil, Config{Serialize: serialize})
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					_ = a.CreatePod(ctx, testPod(fmt.Sprint("p", i)))
					_, _ = a.GetPods(ctx)
					_, _ = a.(provider.StatsProvider).GetStatsSummary(ctx)
				})
			}
			wg.Wait()
			if most := f.most.Load(); serialize && most != 1 {
				t.Errorf("%d calls at once with Serialize", most)
			} else if !serialize && most < 2 {
				t.Errorf("calls never overlapped without Serialize (most %d)", most)
			}
		})
	}
}

func TestNewCarriesTheNodeTheProviderConfiguredOntoVkubelets(t *testing.T) {
	newProvider := func(cfg nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		n := cfg.Node
		if n.Name != "vk-1" {
			t.Errorf("the provider's node is named %q", n.Name)
		}
		n.Labels["provider/zone"] = "a"
		n.Spec.ProviderID = "fake://vk-1"
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "provider", Effect: corev1.TaintEffectNoSchedule})
		n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("42")}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
		n.Status.NodeInfo.OperatingSystem = "linux"
		return newFake(), nil, nil
	}
	a, err := New(t.Context(), Config{NodeName: "vk-1", Client: fake.NewClientset()}, newProvider)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk-1", Labels: map[string]string{"type": "virtual-kubelet"}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: "vk-1"}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 34567
	a.(provider.NodeConfigurer).ConfigureNode(context.Background(), n)
	if n.Labels["provider/zone"] != "a" || n.Labels["type"] != "virtual-kubelet" {
		t.Errorf("labels %v", n.Labels)
	}
	if n.Spec.ProviderID != "fake://vk-1" || len(n.Spec.Taints) != 1 {
		t.Errorf("providerID %q, taints %v", n.Spec.ProviderID, n.Spec.Taints)
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 42 {
		t.Errorf("pods capacity %v", q.String())
	}
	want := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "vk-1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.7"}}
	if fmt.Sprint(n.Status.Addresses) != fmt.Sprint(want) {
		t.Errorf("addresses %v, want %v", n.Status.Addresses, want)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 34567 {
		t.Errorf("kubelet port %d: vkubelet's port is the one it listens on", p)
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	ok := func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		return newFake(), nil, nil
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		f    nodeutil.NewProviderFunc
		want string
	}{
		{"no client", Config{NodeName: "n"}, ok, "Client is required"},
		{"no node name", Config{Client: fake.NewClientset()}, ok, "NodeName is required"},
		{"no provider", Config{NodeName: "n", Client: fake.NewClientset()},
			func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) { return nil, nil, nil }, "returned no provider"},
		{"the provider's own error", Config{NodeName: "n", Client: fake.NewClientset()},
			func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
				return nil, nil, errors.New("config file missing")
			}, "config file missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(t.Context(), tc.cfg, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestTheListersServeWhatThePodsReference(t *testing.T) {
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "settings"}, Data: map[string]string{"k": "v"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"p": []byte("s")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "unreferenced"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: corev1.PodSpec{NodeName: "vk-1"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
	)
	var cfg nodeutil.ProviderConfig
	f := newFake()
	seen := map[string]error{}
	f.onCreate = func(*corev1.Pod) {
		_, seen["configmap"] = cfg.ConfigMaps.ConfigMaps("ns").Get("settings")
		_, seen["secret"] = cfg.Secrets.Secrets("ns").Get("creds")
		_, seen["pod"] = cfg.Pods.Pods("ns").Get("a")
		_, seen["service"] = cfg.Services.Services("ns").Get("web")
		if _, err := cfg.ConfigMaps.ConfigMaps("elsewhere").Get("unreferenced"); !apierrors.IsNotFound(err) {
			t.Errorf("an object no pod references: %v, want NotFound", err)
		}
	}
	a, err := New(t.Context(), Config{NodeName: "vk-1", Client: client}, func(c nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		cfg = c
		return f, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("a")
	pod.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	ctx := context.Background()
	if err := a.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for what, err := range seen {
		if err != nil {
			t.Errorf("the provider could not read the %s: %v", what, err)
		}
	}
	if err := a.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.ConfigMaps.ConfigMaps("ns").Get("settings"); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap of a deleted pod: %v, want NotFound", err)
	}
	if all, _ := cfg.Secrets.List(labels.Everything()); len(all) != 0 {
		t.Errorf("Secrets held after the last pod went: %d", len(all))
	}
}

func readAll(r io.Reader) (string, error) {
	if r == nil {
		return "", nil
	}
	b, err := io.ReadAll(r)
	return string(b), err
}

// causeOnly wraps an error the way github.com/pkg/errors did before Unwrap: by
// Cause alone, which upstream's errdefs follows.
type causeOnly struct{ cause error }

func (c causeOnly) Error() string { return "looking: " + c.cause.Error() }
func (c causeOnly) Cause() error  { return c.cause }

func TestPortForwardStatsAndMetricsAreTheProviders(t *testing.T) {
	a := wrap(t, newFake(), nil, Config{}).(*Adapter)
	ctx := context.Background()
	stream := &loopback{}
	stream.in.WriteString("ping")
	if err := a.PortForward(ctx, "ns", "a", 8080, stream); err != nil || stream.out.String() != "ping" {
		t.Errorf("port-forward echoed %q, %v", stream.out.String(), err)
	}
	if s, err := a.GetStatsSummary(ctx); err != nil || s.Node.NodeName != "fake" {
		t.Errorf("stats summary %+v, %v", s, err)
	}
	if _, err := a.GetMetricsResource(ctx); err != nil {
		t.Errorf("metrics: %v", err)
	}
}

// loopback is a port-forward stream: what is read from in, what is written to out.
type loopback struct{ in, out strings.Builder }

func (l *loopback) Read(p []byte) (int, error) {
	if l.in.Len() == 0 {
		return 0, io.EOF
	}
	n := copy(p, l.in.String())
	rest := l.in.String()[n:]
	l.in.Reset()
	l.in.WriteString(rest)
	return n, nil
}
func (l *loopback) Write(p []byte) (int, error) { return l.out.Write(p) }
func (l *loopback) Close() error                { return nil }
