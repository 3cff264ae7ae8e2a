package cri

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// grpcServer serves gRPC on addr (the health service too when hs is set) until the
// test ends, and returns its port.
func grpcServer(t *testing.T, addr string, hs *health.Server) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if hs != nil {
		healthpb.RegisterHealthServer(srv, hs)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().(*net.TCPAddr).Port
}

func TestGRPCProbeAsksTheHealthService(t *testing.T) {
	hs := health.NewServer() // "" is SERVING
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcServer(t, "127.0.0.1:0", hs)))
	bare := net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcServer(t, "127.0.0.1:0", nil)))
	closed := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	cases := []struct {
		addr, service string
		wantErr       string // "" for healthy
	}{
		{addr, "", ""},
		{addr, "up", ""},
		{addr, "down", "NOT_SERVING"},
		{addr, "unknown", "NotFound"},
		{bare, "", "does not implement grpc.health.v1.Health"},
		{closed, "", "Unavailable"},
	}
	for _, c := range cases {
		err := grpcProbe(context.Background(), c.addr, c.service, 2*time.Second)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("probe of %q at %s: %v, want healthy", c.service, c.addr, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("probe of %q at %s: %v, want an error with %q", c.service, c.addr, err, c.wantErr)
		}
	}
}

// Against containerd: gRPC probes reach the pod at its IP (the pod relays them
// to a health server of the test): readiness follows the service's status, and a
// liveness probe whose server stops serving restarts the container.
func TestGRPCProbes(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	hs := health.NewServer()
	hs.SetServingStatus("app", healthpb.HealthCheckResponse_NOT_SERVING)
	port := grpcServer(t, "0.0.0.0:0", hs)

	// nc relays each connection to port 9000 of the pod to the test's server,
	// through the pod's default gateway (the host).
	pod := busyboxPod("grpc", `gw=$(ip route | awk '/^default/ {print $3}'); exec nc -ll -p 9000 -e nc "$gw" `+strconv.Itoa(port))
	probe := func(service string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000, Service: ptr.To(service)}},
			PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 2,
		}
	}
	pod.Spec.Containers[0].ReadinessProbe = probe("app")
	pod.Spec.Containers[0].LivenessProbe = probe("")
	pod.Spec.Containers[0].LivenessProbe.FailureThreshold = 3
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, pod, 60*time.Second, "Running", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	if st.PodIP == "" || st.PodIP == st.HostIP {
		t.Fatalf("podIP = %q (hostIP %q): not a pod of the CNI network", st.PodIP, st.HostIP)
	}
	// Three probe periods while "app" is NOT_SERVING: never Ready, never restarted.
	eventually.Never(t, 3*time.Second, 100*time.Millisecond, func() (bool, string) {
		st, _ := p.GetPodStatus(ctx, pod.Namespace, pod.Name)
		cs := st.ContainerStatuses[0]
		return cs.Ready || cs.RestartCount > 0, "with app NOT_SERVING and the server SERVING: " + describe(st)
	})
	hs.SetServingStatus("app", healthpb.HealthCheckResponse_SERVING)
	waitRunningReady(t, p, pod)

	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	waitStatus(t, p, pod, 60*time.Second, "a restart for liveness", func(s *corev1.PodStatus) bool {
		return s.ContainerStatuses[0].RestartCount >= 1
	})
}

// As the kubelet's: an HTTP probe follows a redirect on the same host, and takes
// a redirect to another host as the answer (a success) without following it; a
// query in the probe's path reaches the server as a query.
func TestHTTPProbeFollowsOnlyLocalRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusOK)
		case "/local-to-ok":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/local-to-fail":
			http.Redirect(w, r, "/fail", http.StatusFound)
		case "/redirect":
			// A host that refuses connections: following it would fail.
			http.Redirect(w, r, r.URL.Query().Get("loc"), http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().(*net.TCPAddr)
	for path, healthy := range map[string]bool{
		"/ok": true, "/local-to-ok": true, "/redirect?loc=" + url.QueryEscape("http://0.0.0.0:1/"): true,
		"/redirect?loc=%2Ffail": false, "/fail": false, "/local-to-fail": false, "/loop": false,
	} {
		warning, err := httpProbe(context.Background(), probeURL("http", addr.IP.String(), addr.Port, path), nil, 2*time.Second)
		if healthy != (err == nil) {
			t.Errorf("probe of %s: %v, want healthy %v", path, err, healthy)
		}
		// Only the redirect left unfollowed warns, with the answer's body.
		offHost := strings.HasPrefix(path, "/redirect?loc=http")
		if want := `Probe terminated redirects, Response body: <a href="http://0.0.0.0:1/">Found</a>.`; offHost != strings.HasPrefix(warning, want) {
			t.Errorf("probe of %s warns %q; want a warning starting %q: %v", path, warning, want, offHost)
		}
	}
}

// A Host header of an HTTP probe names the host the request asks for, as the
// kubelet's prober sends it.
func TestHTTPProbeSendsItsHostHeader(t *testing.T) {
	hosts := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts <- r.Host }))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().(*net.TCPAddr)
	if _, err := httpProbe(context.Background(), probeURL("http", addr.IP.String(), addr.Port, "/"),
		[]corev1.HTTPHeader{{Name: "host", Value: "app.example"}}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := <-hosts; got != "app.example" {
		t.Errorf("the server was asked for host %q, want app.example", got)
	}
}
