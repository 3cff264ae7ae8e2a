package cri

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// probeStates are the probe results of one container instance.
type probeStates struct {
	containerID    string // the instance these results are about
	started, ready bool
	startup        probeState
	liveness       probeState
	readiness      probeState
}

type probeState struct {
	lastRun             time.Time
	successes, failures int32
}

// probeDefaults are the API server's defaults for fields left zero.
func probeDefaults(pr *corev1.Probe) (period, timeout time.Duration, success, failure int32) {
	period, timeout, success, failure = 10*time.Second, time.Second, 1, 3
	if pr.PeriodSeconds > 0 {
		period = time.Duration(pr.PeriodSeconds) * time.Second
	}
	if pr.TimeoutSeconds > 0 {
		timeout = time.Duration(pr.TimeoutSeconds) * time.Second
	}
	if pr.SuccessThreshold > 0 {
		success = pr.SuccessThreshold
	}
	if pr.FailureThreshold > 0 {
		failure = pr.FailureThreshold
	}
	return
}

// probedContainers are the containers whose probes run: the app containers and
// the sidecars.
func probedContainers(pod *corev1.Pod) []corev1.Container {
	cs := append([]corev1.Container{}, pod.Spec.Containers...)
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(&c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// runProbes runs the probes that are due on the pod's running containers and acts on
// their results: readiness, startup and, for failed liveness or startup probes, a
// restart of the container.
func (p *Provider) runProbes(ctx context.Context, rec *podRecord, pod *corev1.Pod) {
	p.probeContainers(ctx, rec, pod, false)
}

// probeContainers runs the probes due on the pod's running containers. While the
// pod terminates only readiness probes run, as on a kubelet: a container stopping
// goes unready when its probe fails, so that it leaves its Services' endpoints,
// and is never killed by a liveness or startup probe in its grace period.
func (p *Provider) probeContainers(ctx context.Context, rec *podRecord, pod *corev1.Pod, terminating bool) {
	cs := probedContainers(pod)
	for i := range cs {
		c := &cs[i]
		st := rec.ctr(c.Name)
		if st.cur == nil || st.cur.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			st.probes.ready = false
			continue
		}
		if st.probes.containerID != st.cur.Id {
			st.probes = probeStates{containerID: st.cur.Id, started: c.StartupProbe == nil}
		}
		startedAt := time.Unix(0, st.cur.StartedAt)
		if !st.probes.started && !terminating {
			ok, done := p.probeOnce(ctx, rec, pod, c, st, "Startup", c.StartupProbe, &st.probes.startup, startedAt)
			if done && ok {
				st.probes.started = true
			} else if done {
				p.killForProbe(ctx, rec, pod, c, st, c.StartupProbe, "startup")
				continue
			}
		}
		if !st.probes.started {
			st.probes.ready = false
			continue
		}
		if c.LivenessProbe != nil && !terminating {
			if ok, done := p.probeOnce(ctx, rec, pod, c, st, "Liveness", c.LivenessProbe, &st.probes.liveness, startedAt); done && !ok {
				p.killForProbe(ctx, rec, pod, c, st, c.LivenessProbe, "liveness")
				continue
			}
		}
		if c.ReadinessProbe == nil {
			st.probes.ready = true
		} else if ok, done := p.probeOnce(ctx, rec, pod, c, st, "Readiness", c.ReadinessProbe, &st.probes.readiness, startedAt); done {
			st.probes.ready = ok
		}
	}
}

// startupSucceeded reports whether the running instance of the container
// whose state is st has passed its startup probe.
func startupSucceeded(st *ctrState) bool {
	return st.cur != nil && st.probes.containerID == st.cur.Id && st.probes.started
}

// probeWhileStopping keeps the readiness of a terminating pod current while its
// containers stop (stopAll calls it every SyncInterval): it reads the pod from
// the runtime, runs the readiness probes that are due and publishes the
// status, as the kubelet goes on probing readiness in a pod's grace period.
// Once none of its containers runs it publishes nothing: the pod controller
// would take such a status for the end of the pod, which killPod publishes
// once the sandbox is gone too.
func (p *Provider) probeWhileStopping(ctx context.Context, rec *podRecord, pod *corev1.Pod) {
	if err := p.refresh(ctx, rec, pod); err != nil {
		return
	}
	p.probeContainers(ctx, rec, pod, true)
	if anyRunning(rec, pod) {
		p.publish(rec, computeStatus(rec, pod, p.hostIPNow()))
	}
}

// anyRunning reports whether one of the pod's init or app containers runs, as
// the runtime was last read.
func anyRunning(rec *podRecord, pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if st := rec.ctrs[c.Name]; st != nil && st.cur != nil && !st.stale && st.cur.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return true
			}
		}
	}
	return false
}

// probeOnce runs pr, the container's probe of kind which (Startup, Liveness or
// Readiness), if it is due and reports whether its result crossed a threshold
// (done) and which way (ok). A success with a warning is recorded as the
// kubelet records it, a ProbeWarning Event of the container, and each failure
// an Unhealthy one.
func (p *Provider) probeOnce(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, st *ctrState, which string, pr *corev1.Probe, ps *probeState, startedAt time.Time) (ok, done bool) {
	period, timeout, success, failure := probeDefaults(pr)
	now := time.Now()
	if now.Before(startedAt.Add(time.Duration(pr.InitialDelaySeconds)*time.Second)) || now.Before(ps.lastRun.Add(period)) {
		return false, false
	}
	ps.lastRun = now
	warning, err := p.probe(ctx, rec, pod, c, st.cur.Id, pr, timeout)
	if warning != "" {
		p.recordEvent(pod, c.Name, corev1.EventTypeWarning, "ProbeWarning", which+" probe warning: "+warning)
	}
	if err != nil {
		ps.successes = 0
		ps.failures++
		p.log.Debug("probe failed", "pod", rec.key, "container", c.Name, "err", err)
		p.recordEvent(pod, c.Name, corev1.EventTypeWarning, "Unhealthy", which+" probe failed: "+err.Error())
		if ps.failures >= failure {
			ps.failures = 0
			return false, true
		}
		return false, false
	}
	ps.failures = 0
	ps.successes++
	if ps.successes >= success {
		ps.successes = success
		return true, true
	}
	return false, false
}

// killForProbe stops a container whose liveness or startup probe pr failed; the
// pod's restartPolicy then decides whether it restarts. The probe's own
// terminationGracePeriodSeconds, when set, is the grace period of the stop
// instead of the pod's (unless the pod is being deleted, whose grace period
// then rules), as on a kubelet.
func (p *Provider) killForProbe(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, st *ctrState, pr *corev1.Probe, which string) {
	p.log.Info("container failed its probe, restarting it", "pod", rec.key, "container", c.Name, "probe", which)
	p.recordEvent(pod, c.Name, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.Name, strings.ToLower(which)))
	p.stopContainer(ctx, rec, withProbeGracePeriod(pod, pr), c.Name, st.cur.Id)
	st.probes.ready = false
}

// withProbeGracePeriod is pod as a stop for a failed probe pr sees it: with the
// probe's terminationGracePeriodSeconds as the pod's when the probe sets one and
// the pod is not being deleted. pod itself is not changed.
func withProbeGracePeriod(pod *corev1.Pod, pr *corev1.Probe) *corev1.Pod {
	if pr == nil || pr.TerminationGracePeriodSeconds == nil || pod.DeletionGracePeriodSeconds != nil {
		return pod
	}
	out := *pod
	out.Spec.TerminationGracePeriodSeconds = pr.TerminationGracePeriodSeconds
	return &out
}

// probe runs one check of pr against the container: nil if it passed, with
// what a passing check had to warn about, if anything.
func (p *Provider) probe(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, id string, pr *corev1.Probe, timeout time.Duration) (warning string, err error) {
	switch {
	case pr.Exec != nil:
		pctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
		defer cancel()
		resp, err := p.runtime.ExecSync(pctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: pr.Exec.Command, Timeout: int64(timeout / time.Second)})
		if err != nil {
			return "", err
		}
		if resp.ExitCode != 0 {
			return "", fmt.Errorf("exit code %d: %s", resp.ExitCode, resp.Stderr)
		}
		return "", nil
	case pr.HTTPGet != nil:
		h := pr.HTTPGet
		port, err := resolvePort(h.Port, c)
		if err != nil {
			return "", err
		}
		host := h.Host
		if host == "" {
			host = p.probeHost(rec, pod)
		}
		scheme := "http"
		if h.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		return httpProbe(ctx, probeURL(scheme, host, port, h.Path), h.HTTPHeaders, timeout)
	case pr.TCPSocket != nil:
		port, err := resolvePort(pr.TCPSocket.Port, c)
		if err != nil {
			return "", err
		}
		host := pr.TCPSocket.Host
		if host == "" {
			host = p.probeHost(rec, pod)
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		if err != nil {
			return "", err
		}
		return "", conn.Close()
	case pr.GRPC != nil:
		service := ""
		if pr.GRPC.Service != nil {
			service = *pr.GRPC.Service
		}
		addr := net.JoinHostPort(p.probeHost(rec, pod), strconv.Itoa(int(pr.GRPC.Port)))
		return "", grpcProbe(ctx, addr, service, timeout)
	}
	return "", fmt.Errorf("probe type not supported (exec, httpGet, tcpSocket and grpc are)")
}

// probeURL is the URL an httpGet probe or hook asks for: path may carry a query
// (/redirect?loc=...), which must reach the server as one, not escaped into
// the path; a path that does not parse is taken as a plain path.
func probeURL(scheme, host string, port int, path string) string {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	return u.String()
}

// httpProbe GETs target with headers: healthy when it answers 2xx or 3xx within
// timeout. As the kubelet's prober, it follows redirects on the same host (up to
// ten) but not to another host: such a redirect is itself the answer, a success
// with a warning (the kubelet's ProbeWarning, with the answer's body), since the
// other host is not the container's. A Host header names the host asked for.
func httpProbe(ctx context.Context, target string, headers []corev1.HTTPHeader, timeout time.Duration) (warning string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "kube-probe/vkubelet")
	for _, hd := range headers {
		if http.CanonicalHeaderKey(hd.Name) == "Host" {
			// Go sends req.Host, never a Host in the header map.
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	client := &http.Client{
		// A transport per probe, so no connection is kept once it answers: a
		// kept one would stay open, with its goroutines, for as long as the
		// container lets it (the kubelet's prober disables keep-alives too).
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if next.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return fmt.Errorf("stopped after %d redirects", len(via))
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return "", fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	if resp.StatusCode >= 300 {
		// Only a redirect to another host is left unfollowed.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
		return "Probe terminated redirects, Response body: " + string(body), nil
	}
	return "", nil
}

// probeBodyLimit bounds what of an answer a probe reads, as the kubelet's.
const probeBodyLimit = 10 << 10

// grpcProbe asks the gRPC server at addr, without TLS as the kubelet does, for
// the health of service with the standard protocol (grpc.health.v1.Health/Check):
// healthy when it answers SERVING within timeout.
func grpcProbe(ctx context.Context, addr, service string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("kube-probe/vkubelet"))
	if err != nil {
		return fmt.Errorf("gRPC probe of %s: %w", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("gRPC probe of %s: the server does not implement grpc.health.v1.Health", addr)
	case err != nil:
		return fmt.Errorf("gRPC probe of %s: %w", addr, err)
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return fmt.Errorf("gRPC probe of %s: service %q is %s", addr, service, resp.GetStatus())
	}
	return nil
}

// probeHost is where network probes connect: the pod's IP, or the loopback address
// for a pod in the host's network namespace.
func (p *Provider) probeHost(rec *podRecord, pod *corev1.Pod) string {
	if p.hostNetwork(pod) || rec.podIP == "" {
		return "127.0.0.1"
	}
	return rec.podIP
}

func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in container %s", port.StrVal, c.Name)
}
