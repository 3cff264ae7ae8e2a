package cri

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// This file holds the containers' lifecycle hooks, run as the kubelet runs them.
//
// postStart runs once a container has started, and the pod's goroutine waits for
// it: the container's status is not published as running, nor its probes run,
// and the pod's next container does not start, until the hook has returned. A
// hook that fails has its container killed (preStop first, as any kill), which
// then restarts as its restartPolicy says. The pod's deletion, or the provider's
// Close, interrupts it.
//
// preStop runs before a running container is stopped: on the pod's deletion, a
// failed liveness or startup probe, a new image, the active deadline, a failed
// postStart. Its time counts against the grace period; the container is then
// stopped with what is left, at least minStopGrace. A preStop hook that fails
// or runs out of time does not keep the container from stopping.
//
// A hook is an exec (the runtime's ExecSync, no timeout of its own), an httpGet
// from the provider's process (hookHTTPGet) or a sleep. tcpSocket, which the API
// still accepts, is not run and fails, as on the kubelet.
//
// The kubelet records FailedPostStartHook and FailedPreStopHook Warning events;
// the provider contract has no way to record events, so they are logged at
// warning level with that reason. A failed postStart's message is also the
// container's waiting message (reason PostStartHookError) until its restart
// back-off begins, as on the kubelet.

const (
	reasonFailedPostStartHook = "FailedPostStartHook"
	reasonFailedPreStopHook   = "FailedPreStopHook"
	reasonPostStartHookError  = "PostStartHookError"

	// minStopGrace is the least time between SIGTERM and SIGKILL the kubelet
	// gives a container whose stop a preStop hook or its turn delayed.
	minStopGrace = 2 * time.Second
	// hookBodyLimit is how much of an httpGet hook's answer is read.
	hookBodyLimit = 10 << 10
)

// runHook runs handler h for container c of the pod in its running instance id;
// podHost is where an httpGet without host connects. On failure it returns the
// kubelet's message for the container's status with the error.
func (p *Provider) runHook(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id, podHost string, h *corev1.LifecycleHandler) (string, error) {
	where := fmt.Sprintf("for Container %q in Pod %q", c.Name, fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID))
	switch {
	case h.Exec != nil:
		resp, err := p.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: h.Exec.Command})
		if err == nil && resp.ExitCode != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), resp.ExitCode, resp.Stderr)
		}
		if err != nil {
			out := append(append([]byte(nil), resp.GetStdout()...), resp.GetStderr()...)
			return fmt.Sprintf("Exec lifecycle hook (%v) %s failed - error: %v, message: %q", h.Exec.Command, where, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := hookHTTPGet(ctx, h.HTTPGet, c, podHost, p.logHTTPFallback(pod)); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) %s failed - error: %v", h.HTTPGet.Path, where, err), err
		}
		return "", nil
	case h.Sleep != nil:
		if err := sleepHook(ctx, time.Duration(h.Sleep.Seconds)*time.Second); err != nil {
			return fmt.Sprintf("Sleep lifecycle hook (%d) %s failed - error: %v", h.Sleep.Seconds, where, err), err
		}
		return "", nil
	case h.TCPSocket != nil:
		err := errors.New("invalid handler: tcpSocket is not supported in lifecycle hooks")
		return "Cannot run handler: " + err.Error(), err
	}
	err := errors.New("invalid handler: no action")
	return "Cannot run handler: " + err.Error(), err
}

func sleepHook(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errors.New("container terminated before sleep hook finished")
	}
}

// logHTTPFallback logs what the kubelet records as a LifecycleHTTPFallback
// Warning event of the pod.
func (p *Provider) logHTTPFallback(pod *corev1.Pod) func(host string) {
	return func(host string) {
		p.log.Warn("request to HTTPS lifecycle hook got HTTP response, retry with HTTP succeeded",
			"pod", pod.Namespace+"/"+pod.Name, "host", host, "reason", "LifecycleHTTPFallback")
	}
}

// hookHTTPGet makes the GET of an httpGet hook of container c, as the kubelet
// does: to podHost unless the action names a host, the port by number or by
// the name of one of c's ports, HTTPS without verifying the certificate, the
// action's headers (Host among them) over a User-Agent and an Accept of */*.
// Any answer is a success, whatever its status: only a request that gets none
// fails. Redirects are followed on the same host only; one to another host is
// itself the answer. An HTTPS request answered in plain HTTP is made again in
// HTTP without its Authorization header, and fellBack is told.
func hookHTTPGet(ctx context.Context, h *corev1.HTTPGetAction, c *corev1.Container, podHost string, fellBack func(host string)) error {
	port, err := resolvePort(h.Port, c)
	if err != nil {
		return err
	}
	host := h.Host
	if host == "" {
		host = podHost
	}
	scheme := strings.ToLower(string(h.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL(scheme, host, port, h.Path), nil)
	if err != nil {
		return err
	}
	for _, hd := range h.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", "kube-lifecycle/vkubelet")
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	} else if req.Header.Get("Accept") == "" {
		req.Header.Del("Accept") // set empty: no Accept at all
	}
	req.Host = req.Header.Get("Host")
	client := &http.Client{
		// A transport per hook, keeping no connection: as for probes, a kept
		// one would stay open with its goroutines while the server lets it.
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		CheckRedirect: sameHostRedirects,
	}
	resp, err := client.Do(req)
	drain(resp)
	if err != nil && req.URL.Scheme == "https" && answeredInPlainHTTP(err) {
		plain := req.Clone(ctx)
		plain.URL.Scheme = "http"
		plain.Header.Del("Authorization")
		resp, perr := client.Do(plain)
		drain(resp)
		if perr == nil {
			fellBack(plain.URL.Host)
			return nil
		}
	}
	return err
}

// sameHostRedirects lets a client follow redirects on the first request's host
// only, up to ten; one to another host is returned as the answer.
func sameHostRedirects(next *http.Request, via []*http.Request) error {
	if next.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return fmt.Errorf("stopped after %d redirects", len(via))
	}
	return nil
}

// answeredInPlainHTTP tells the error of an HTTPS request to a server that
// speaks plain HTTP.
func answeredInPlainHTTP(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "server gave HTTP response to HTTPS client")
}

func drain(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, hookBodyLimit))
	resp.Body.Close()
}

// postStart runs c's postStart hook, if it has one, on its instance id just
// started, and waits for it (see the top of this file). A deletion of the pod
// (it wakes the goroutine) cancels it; the deletion then stops the container.
// When the hook fails, the container is killed, and waits with reason
// PostStartHookError if it is to restart. It returns the hook's error.
func (p *Provider) postStart(ctx context.Context, rec *podRecord, pod *corev1.Pod, c *corev1.Container, st *ctrState, id string) error {
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		return nil
	}
	// What the runtime showed before this start, as the kubelet's status shows
	// while it runs the hook: a pod whose first container's hook never returns
	// is seen Pending, not left without a status.
	p.publish(rec, computeStatus(rec, pod, p.hostIPNow()))
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		msg string
		err error
	}
	done := make(chan result, 1)
	host := p.probeHost(rec, pod)
	go func() {
		msg, err := p.runHook(hctx, pod, c, id, host, c.Lifecycle.PostStart)
		done <- result{msg, err}
	}()
	var res result
	woken := false
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-rec.wake:
			woken = true
			if p.deletingPod(rec) {
				cancel()
			}
		}
	}
	if woken {
		rec.wakeUp() // for the next sync, which this one may have delayed
	}
	if res.err == nil {
		p.log.Debug("postStart hook done", "pod", rec.key, "container", c.Name)
		return nil
	}
	if p.deletingPod(rec) || ctx.Err() != nil {
		p.log.Info("postStart hook interrupted: the pod is deleted or the provider closed", "pod", rec.key, "container", c.Name, "err", res.err)
		return res.err
	}
	// The message, with what the hook printed, goes to the container's status,
	// as the kubelet's does, and not in the warning that stands for its event.
	p.log.Warn("PostStartHook failed, killing the container", "pod", rec.key, "container", c.Name, "reason", reasonFailedPostStartHook, "err", res.err)
	p.stopContainer(ctx, rec, pod, c.Name, id)
	sctx, scancel := context.WithTimeout(ctx, rpcTimeout)
	defer scancel()
	resp, err := p.runtime.ContainerStatus(sctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err == nil && restartsAfter(pod, c, resp.GetStatus().GetExitCode()) {
		st.waitReason, st.waitMessage = reasonPostStartHookError, res.msg
	}
	return res.err
}

// deletingPod reports whether the pod has been asked to stop.
func (p *Provider) deletingPod(rec *podRecord) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return rec.deleting
}

// restartsAfter reports whether container c of the pod is started again after
// it exited with exitCode, as startContainers decides.
func restartsAfter(pod *corev1.Pod, c *corev1.Container, exitCode int32) bool {
	if isSidecar(c) {
		return true
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return exitCode != 0 && shouldRestart(c, pod, exitCode)
		}
	}
	return shouldRestart(c, pod, exitCode)
}

// preStop runs c's preStop hook on its running instance id, until it returns or
// ctx ends (the grace period is over). Its failure is logged; the container is
// stopped all the same.
func (p *Provider) preStop(ctx context.Context, key string, pod *corev1.Pod, c *corev1.Container, id, podHost string) {
	start := time.Now()
	_, err := p.runHook(ctx, pod, c, id, podHost, c.Lifecycle.PreStop)
	switch {
	case err == nil:
		p.log.Debug("preStop hook done", "pod", key, "container", c.Name, "took", time.Since(start))
	case ctx.Err() != nil:
		p.log.Info("preStop hook not done within the grace period", "pod", key, "container", c.Name, "took", time.Since(start))
	default:
		p.log.Warn("PreStopHook failed", "pod", key, "container", c.Name, "reason", reasonFailedPreStopHook, "err", err)
	}
}

// hasPreStop reports whether c has a preStop hook.
func hasPreStop(c *corev1.Container) bool {
	return c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil
}

// specContainer is the pod's init or app container named name, or nil.
func specContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// stopOrder holds back the stop of a pod's sidecars, as the kubelet does: each
// waits until every app container has stopped, then every sidecar after it
// in the spec, so that the preStop hooks and the last moments of the others
// still find them serving. Their own preStop hooks run at once. Containers
// that do not run are counted as stopped.
type stopOrder struct {
	stopped map[string]chan struct{}
	after   map[string][]chan struct{} // sidecar → what it waits for
}

func newStopOrder(pod *corev1.Pod, running map[string]bool) *stopOrder {
	o := &stopOrder{stopped: map[string]chan struct{}{}, after: map[string][]chan struct{}{}}
	track := func(name string) chan struct{} {
		ch := make(chan struct{})
		if !running[name] {
			close(ch)
		}
		o.stopped[name] = ch
		return ch
	}
	var apps []chan struct{}
	for _, c := range pod.Spec.Containers {
		apps = append(apps, track(c.Name))
	}
	var later chan struct{} // the next sidecar in the spec
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		ch := track(c.Name)
		if !isSidecar(c) {
			continue
		}
		o.after[c.Name] = append([]chan struct{}(nil), apps...)
		if later != nil {
			o.after[c.Name] = append(o.after[c.Name], later)
		}
		later = ch
	}
	return o
}

// waitTurn waits until name may stop, or ctx ends.
func (o *stopOrder) waitTurn(ctx context.Context, name string) {
	for _, ch := range o.after[name] {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// done records that name has stopped; only the goroutine stopping name calls it.
func (o *stopOrder) done(name string) {
	ch, ok := o.stopped[name]
	if !ok {
		return
	}
	select {
	case <-ch: // it was not running
	default:
		close(ch)
	}
}
