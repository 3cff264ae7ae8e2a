package cri

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

// hookRuntime is a runtime that runs hooks' execs with exec and records the
// stops. The methods it does not define panic (nil embedded interface).
type hookRuntime struct {
	runtimeapi.RuntimeServiceClient
	exec     func(ctx context.Context, id string, cmd []string) (*runtimeapi.ExecSyncResponse, error)
	exitCode int32 // of a stopped container

	mu     sync.Mutex
	events []string // "exec <id>", "stop <id> <timeout>", in order
}

func (f *hookRuntime) record(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *hookRuntime) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

func (f *hookRuntime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	f.record("exec " + req.ContainerId)
	return f.exec(ctx, req.ContainerId, req.Cmd)
}

func (f *hookRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	f.record(fmt.Sprintf("stop %s %d", req.ContainerId, req.Timeout))
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *hookRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: req.ContainerId, State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: f.exitCode,
	}}, nil
}

func hookProvider(t *testing.T, rt *hookRuntime) *Provider {
	return &Provider{
		runtime: rt,
		log:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		pods:    map[string]*podRecord{},
	}
}

func hookPod(policy corev1.RestartPolicy, grace int64, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To(grace),
			Containers:                    containers,
		},
	}
}

func hookRecord(pod *corev1.Pod) *podRecord {
	return &podRecord{key: "default/web", uid: pod.UID, wake: make(chan struct{}, 1), pod: pod, podIP: "10.88.0.7", ctrs: map[string]*ctrState{}}
}

func execHook(cmd ...string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

func execExits(code int32, stdout, stderr string) func(context.Context, string, []string) (*runtimeapi.ExecSyncResponse, error) {
	return func(context.Context, string, []string) (*runtimeapi.ExecSyncResponse, error) {
		return &runtimeapi.ExecSyncResponse{ExitCode: code, Stdout: []byte(stdout), Stderr: []byte(stderr)}, nil
	}
}

func TestExecHookFailsWithTheKubeletsMessage(t *testing.T) {
	rt := &hookRuntime{exec: execExits(7, "out", "boom")}
	p := hookProvider(t, rt)
	pod := hookPod(corev1.RestartPolicyAlways, 30)
	c := &corev1.Container{Name: "main"}
	msg, err := p.runHook(context.Background(), pod, c, "c1", "", execHook("sh", "-c", "exit 7"))
	want := `Exec lifecycle hook ([sh -c exit 7]) for Container "main" in Pod "web_default(uid-1)" failed - error: command 'sh -c exit 7' exited with 7: boom, message: "outboom"`
	if err == nil || msg != want {
		t.Errorf("runHook = %q, %v; want %q", msg, err, want)
	}
	rt.exec = execExits(0, "fine", "")
	if msg, err := p.runHook(context.Background(), pod, c, "c1", "", execHook("true")); err != nil || msg != "" {
		t.Errorf("runHook of a command exiting 0 = %q, %v", msg, err)
	}
}

func TestSleepAndTCPSocketHooks(t *testing.T) {
	p := hookProvider(t, &hookRuntime{})
	pod := hookPod(corev1.RestartPolicyAlways, 30)
	c := &corev1.Container{Name: "main"}
	start := time.Now()
	if _, err := p.runHook(context.Background(), pod, c, "c1", "", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}); err != nil || time.Since(start) > time.Second {
		t.Errorf("sleep 0 = %v after %s", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg, err := p.runHook(ctx, pod, c, "c1", "", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}})
	if err == nil || !strings.Contains(msg, "Sleep lifecycle hook (3600)") || !strings.Contains(msg, "container terminated before sleep hook finished") {
		t.Errorf("interrupted sleep = %q, %v", msg, err)
	}
	msg, err = p.runHook(context.Background(), pod, c, "c1", "", &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}})
	if err == nil || !strings.HasPrefix(msg, "Cannot run handler: invalid handler") {
		t.Errorf("tcpSocket hook = %q, %v; want it refused", msg, err)
	}
}

// hookServer records the requests it gets.
type hookServer struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *hookServer) handler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
	switch r.URL.Path {
	case "/fail":
		http.Error(w, "no", http.StatusInternalServerError)
	case "/local-redirect":
		http.Redirect(w, r, "/landed", http.StatusFound)
	case "/remote-redirect":
		http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusFound)
	}
}

func (s *hookServer) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.reqs {
		out = append(out, r.URL.RequestURI())
	}
	return out
}

func (s *hookServer) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[len(s.reqs)-1]
}

func hostPort(t *testing.T, rawURL string) (string, int) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	n, _ := strconv.Atoi(port)
	return host, n
}

// An httpGet hook is the kubelet's: the pod's host by default, the port by
// name, the path with its query, the action's headers (Host too) over the
// defaults; any answer succeeds, whatever its status; a redirect is followed
// on the same host only; no answer fails.
func TestHTTPGetHookAsTheKubelet(t *testing.T) {
	s := &hookServer{}
	srv := httptest.NewServer(http.HandlerFunc(s.handler))
	defer srv.Close()
	host, port := hostPort(t, srv.URL)
	c := &corev1.Container{Name: "main", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	get := func(h *corev1.HTTPGetAction) error {
		return hookHTTPGet(context.Background(), h, c, host, func(string) { t.Errorf("fell back to HTTP") })
	}

	if err := get(&corev1.HTTPGetAction{Path: "/echo?msg=poststart", Port: intstr.FromString("http"), HTTPHeaders: []corev1.HTTPHeader{
		{Name: "X-Hook", Value: "yes"}, {Name: "Host", Value: "hooks.example"},
	}}); err != nil {
		t.Fatal(err)
	}
	r := s.last()
	if r.URL.RequestURI() != "/echo?msg=poststart" || r.Header.Get("X-Hook") != "yes" || r.Host != "hooks.example" ||
		r.Header.Get("Accept") != "*/*" || !strings.HasPrefix(r.UserAgent(), "kube-lifecycle/") {
		t.Errorf("request = %s host %q headers %v", r.URL.RequestURI(), r.Host, r.Header)
	}
	if err := get(&corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port)), HTTPHeaders: []corev1.HTTPHeader{
		{Name: "Accept", Value: ""}, {Name: "User-Agent", Value: "mine"},
	}}); err != nil {
		t.Fatal(err)
	}
	if r := s.last(); r.Header.Get("Accept") != "" || r.UserAgent() != "mine" {
		t.Errorf("headers set by the action = %v", r.Header)
	}

	before := len(s.paths())
	for _, path := range []string{"/fail", "/local-redirect", "/remote-redirect"} {
		if err := get(&corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}); err != nil {
			t.Errorf("GET %s: %v; any answer is a success", path, err)
		}
	}
	if got, want := strings.Join(s.paths()[before:], " "), "/fail /local-redirect /landed /remote-redirect"; got != want {
		t.Errorf("requests = %s, want %s", got, want)
	}

	if err := get(&corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("metrics")}); err == nil {
		t.Error("a port name the container does not have: no error")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closed := hostPort(t, "http://"+ln.Addr().String())
	ln.Close()
	if err := get(&corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(closed))}); err == nil {
		t.Error("nothing listening: no error")
	}
}

// An HTTPS hook does not verify the certificate; one answered in plain HTTP
// is made again in HTTP, without its Authorization header.
func TestHTTPSHook(t *testing.T) {
	s := &hookServer{}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(s.handler))
	defer tlsSrv.Close()
	host, port := hostPort(t, tlsSrv.URL)
	c := &corev1.Container{Name: "main"}
	if err := hookHTTPGet(context.Background(), &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Path: "/tls", Port: intstr.FromInt32(int32(port))}, c, host,
		func(string) { t.Error("fell back to HTTP") }); err != nil {
		t.Fatalf("HTTPS hook to a self-signed server: %v", err)
	}
	if r := s.last(); r.TLS == nil || r.URL.Path != "/tls" {
		t.Errorf("request = %s, TLS %v", r.URL.Path, r.TLS != nil)
	}

	plain := httptest.NewServer(http.HandlerFunc(s.handler))
	defer plain.Close()
	host, port = hostPort(t, plain.URL)
	var fellBack string
	if err := hookHTTPGet(context.Background(), &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Path: "/plain", Port: intstr.FromInt32(int32(port)),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer x"}}}, c, host,
		func(h string) { fellBack = h }); err != nil {
		t.Fatalf("HTTPS hook to a plain HTTP server: %v", err)
	}
	if r := s.last(); r.URL.Path != "/plain" || r.Header.Get("Authorization") != "" || fellBack != net.JoinHostPort(host, strconv.Itoa(port)) {
		t.Errorf("fallback request = %s, Authorization %q, fell back to %q", r.URL.Path, r.Header.Get("Authorization"), fellBack)
	}
}

// A postStart hook that fails has its container killed (preStop first), which
// waits with the hook's message until its back-off if it is to restart.
func TestAFailedPostStartKillsTheContainer(t *testing.T) {
	for _, tc := range []struct {
		policy    corev1.RestartPolicy
		exit      int32
		restarted bool
	}{
		{corev1.RestartPolicyAlways, 0, true},
		{corev1.RestartPolicyOnFailure, 137, true},
		{corev1.RestartPolicyOnFailure, 0, false},
		{corev1.RestartPolicyNever, 137, false},
	} {
		t.Run(fmt.Sprintf("%s-exit-%d", tc.policy, tc.exit), func(t *testing.T) {
			rt := &hookRuntime{exitCode: tc.exit, exec: func(_ context.Context, _ string, cmd []string) (*runtimeapi.ExecSyncResponse, error) {
				if cmd[0] == "prestop" {
					return &runtimeapi.ExecSyncResponse{}, nil
				}
				return &runtimeapi.ExecSyncResponse{ExitCode: 1, Stderr: []byte("no")}, nil
			}}
			p := hookProvider(t, rt)
			c := corev1.Container{Name: "main", Lifecycle: &corev1.Lifecycle{PostStart: execHook("poststart"), PreStop: execHook("prestop")}}
			pod := hookPod(tc.policy, 5, c)
			rec := hookRecord(pod)
			st := rec.ctr("main")
			if err := p.postStart(context.Background(), rec, pod, &pod.Spec.Containers[0], st, "c1"); err == nil {
				t.Fatal("postStart: no error")
			}
			if got, want := strings.Join(rt.recorded(), ", "), "exec c1, exec c1, stop c1 5"; got != want {
				t.Errorf("runtime calls = %s, want %s (postStart, preStop, stop with the grace left in whole seconds)", got, want)
			}
			if tc.restarted != (st.waitReason == reasonPostStartHookError) || tc.restarted != strings.Contains(st.waitMessage, "Exec lifecycle hook ([poststart])") {
				t.Errorf("waiting %q %q; restarted %v", st.waitReason, st.waitMessage, tc.restarted)
			}
		})
	}
}

// A postStart hook is interrupted by the pod's deletion, which then stops the
// container: it is not killed as a failed hook.
func TestPostStartIsInterruptedByTheDeletion(t *testing.T) {
	rt := &hookRuntime{exec: func(ctx context.Context, _ string, _ []string) (*runtimeapi.ExecSyncResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	p := hookProvider(t, rt)
	pod := hookPod(corev1.RestartPolicyAlways, 30, corev1.Container{Name: "main", Lifecycle: &corev1.Lifecycle{PostStart: execHook("hang")}})
	rec := hookRecord(pod)
	done := make(chan error, 1)
	go func() {
		done <- p.postStart(context.Background(), rec, pod, &pod.Spec.Containers[0], rec.ctr("main"), "c1")
	}()
	rec.wakeUp() // woken, not deleting: it keeps waiting
	eventually.Never(t, 300*time.Millisecond, 20*time.Millisecond, func() (bool, string) {
		select {
		case err := <-done:
			return true, fmt.Sprintf("postStart returned %v", err)
		default:
			return false, ""
		}
	})
	p.mu.Lock()
	rec.deleting = true
	p.mu.Unlock()
	rec.wakeUp()
	if err := eventually.Receive(t, done, 10*time.Second, "postStart's end"); err == nil {
		t.Error("postStart: no error")
	}
	if got := rt.recorded(); len(got) != 1 {
		t.Errorf("runtime calls = %v, want the hook's exec alone", got)
	}
	select {
	case <-rec.wake:
	default:
		t.Error("the wake-up postStart took was not given back")
	}
}

// On deletion each running container's preStop hook runs, then the container
// is stopped with the rest of the grace period (at least 2s); a sidecar stops
// only after the app containers, and before the sidecars ahead of it in the
// spec.
func TestStopAllRunsPreStopHooksThenStopsInOrder(t *testing.T) {
	rt := &hookRuntime{exec: func(ctx context.Context, id string, _ []string) (*runtimeapi.ExecSyncResponse, error) {
		if id == "app" {
			time.Sleep(300 * time.Millisecond) // the sidecars wait for it
		}
		return &runtimeapi.ExecSyncResponse{}, nil
	}}
	p := hookProvider(t, rt)
	hook := &corev1.Lifecycle{PreStop: execHook("prestop")}
	pod := hookPod(corev1.RestartPolicyAlways, 30, corev1.Container{Name: "app", Lifecycle: hook}, corev1.Container{Name: "done", Lifecycle: hook})
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "side1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Lifecycle: hook},
		{Name: "init"},
		{Name: "side2", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
	}
	rec := hookRecord(pod)
	for name, state := range map[string]runtimeapi.ContainerState{
		"app": runtimeapi.ContainerState_CONTAINER_RUNNING, "done": runtimeapi.ContainerState_CONTAINER_EXITED,
		"side1": runtimeapi.ContainerState_CONTAINER_RUNNING, "init": runtimeapi.ContainerState_CONTAINER_EXITED,
		"side2": runtimeapi.ContainerState_CONTAINER_RUNNING,
	} {
		rec.ctr(name).cur = &runtimeapi.ContainerStatus{Id: name, State: state}
	}
	p.stopAll(context.Background(), rec, pod, time.Now().Add(10*time.Second))
	var stops []string
	execs := map[string]bool{}
	for _, e := range rt.recorded() {
		f := strings.Fields(e)
		if f[0] == "stop" {
			stops = append(stops, f[1]+" "+f[2])
		} else {
			execs[f[1]] = true
		}
	}
	if got, want := strings.Join(stops, ", "), "app 10, side2 10, side1 10"; got != want {
		t.Errorf("stops = %s, want %s", got, want)
	}
	if !execs["app"] || !execs["side1"] || len(execs) != 2 {
		t.Errorf("preStop hooks run in %v, want app and side1", execs)
	}
}

// A preStop hook that does not return within the grace period is cut short,
// and the sidecars then stop at once; each container still gets 2s to stop.
func TestStopAllEndsWithTheGracePeriod(t *testing.T) {
	rt := &hookRuntime{exec: func(ctx context.Context, _ string, _ []string) (*runtimeapi.ExecSyncResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	p := hookProvider(t, rt)
	pod := hookPod(corev1.RestartPolicyAlways, 30, corev1.Container{Name: "app", Lifecycle: &corev1.Lifecycle{PreStop: execHook("hang")}})
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	rec := hookRecord(pod)
	rec.ctr("app").cur = &runtimeapi.ContainerStatus{Id: "app", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	rec.ctr("side").cur = &runtimeapi.ContainerStatus{Id: "side", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	start := time.Now()
	p.stopAll(context.Background(), rec, pod, start.Add(time.Second))
	if took := time.Since(start); took < 900*time.Millisecond || took > 10*time.Second {
		t.Errorf("stopAll took %s with a hook hanging and 1s of grace", took)
	}
	got := rt.recorded()
	if len(got) != 3 || got[0] != "exec app" || !slices.Contains(got, "stop app 2") || !slices.Contains(got, "stop side 2") {
		t.Errorf("runtime calls = %v", got)
	}
}

// A later deletion with a shorter grace period cuts the preStop hooks short.
func TestStopAllHonoursAShorterGracePeriod(t *testing.T) {
	rt := &hookRuntime{exec: func(ctx context.Context, _ string, _ []string) (*runtimeapi.ExecSyncResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	p := hookProvider(t, rt)
	pod := hookPod(corev1.RestartPolicyAlways, 300, corev1.Container{Name: "app", Lifecycle: &corev1.Lifecycle{PreStop: execHook("hang")}})
	rec := hookRecord(pod)
	rec.ctr("app").cur = &runtimeapi.ContainerStatus{Id: "app", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	done := make(chan struct{})
	go func() {
		p.stopAll(context.Background(), rec, pod, time.Now().Add(5*time.Minute))
		close(done)
	}()
	eventually.True(t, 10*time.Second, func() (bool, string) { return len(rt.recorded()) == 1, "preStop hook not run" })
	p.mu.Lock()
	rec.deleting, rec.deleteBy = true, time.Now()
	p.mu.Unlock()
	rec.wakeUp()
	eventually.Receive(t, done, 10*time.Second, "stopAll's end with the shorter grace period")
	if got := rt.recorded(); len(got) != 2 || got[1] != "stop app 2" {
		t.Errorf("runtime calls = %v", got)
	}
}

func TestRestartsAfter(t *testing.T) {
	side := corev1.Container{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	init := corev1.Container{Name: "init"}
	app := corev1.Container{Name: "app"}
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		c      corev1.Container
		exit   int32
		want   bool
	}{
		{corev1.RestartPolicyNever, side, 0, true},
		{corev1.RestartPolicyAlways, init, 0, false}, // done
		{corev1.RestartPolicyAlways, init, 1, true},
		{corev1.RestartPolicyNever, init, 1, false},
		{corev1.RestartPolicyAlways, app, 0, true},
		{corev1.RestartPolicyOnFailure, app, 0, false},
		{corev1.RestartPolicyOnFailure, app, 143, true},
		{corev1.RestartPolicyNever, app, 143, false},
	} {
		pod := hookPod(tc.policy, 30, app)
		pod.Spec.InitContainers = []corev1.Container{side, init}
		if got := restartsAfter(pod, &tc.c, tc.exit); got != tc.want {
			t.Errorf("restartsAfter(%s, %s, exit %d) = %v", tc.policy, tc.c.Name, tc.exit, got)
		}
	}
}
