// Package conformance is the provider conformance suite (`vkubelet provider
// conformance`): what a node agent relies on from a provider, checked through the
// provider protocol against any endpoint, whatever the provider's language.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// Config says what the conformance suite runs against.
type Config struct {
	Remote   remote.Config
	NodeName string
	// Image is the image of the test pod; Command, if set, its command (one
	// that keeps running, for providers that run real containers).
	Image   string
	Command []string
	// Timeout bounds each wait for the provider (Running, stopped). Default 2m.
	Timeout time.Duration
	Log     io.Writer
}

// CheckResult is one check of the suite.
type CheckResult struct {
	Name    string
	Skipped bool // the provider does not claim the capability
	Err     error
	Took    time.Duration
}

// Run runs the suite against an endpoint. It creates one pod (namespace
// vkubelet-conformance) and deletes it at the end, even after a failed check.
func Run(ctx context.Context, cfg Config) ([]CheckResult, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Image == "" {
		cfg.Image = "busybox"
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	c, err := remote.New(ctx, cfg.Remote, cfg.NodeName, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s := &suite{c: c, cfg: cfg}
	uid := types.UID(fmt.Sprintf("conformance-%d", time.Now().UnixNano()))
	s.pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vkubelet-conformance", Name: "conformance-" + string(uid[len(uid)-6:]), UID: uid,
			CreationTimestamp: metav1.Now(), Labels: map[string]string{"app": "conformance"}},
		Spec: corev1.PodSpec{NodeName: cfg.NodeName, RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To(int64(2)),
			Containers: []corev1.Container{{Name: "main", Image: cfg.Image, Command: cfg.Command, Args: []string{"conformance"},
				ImagePullPolicy: corev1.PullIfNotPresent}}},
	}
	s.resolved = &provider.ResolvedPod{Pod: s.pod, Env: map[string][]corev1.EnvVar{"main": {{Name: "CONFORMANCE", Value: "yes"}}}}
	checks := []struct {
		name string
		need func(*suite) bool
		run  func(*suite, context.Context) error
	}{
		{"capabilities", nil, (*suite).capabilities},
		{"an unknown pod is NotFound", nil, (*suite).unknownPod},
		{"create: the pod runs", nil, (*suite).create},
		{"list: the pod is listed with its UID", nil, (*suite).list},
		{"create again: the same pod is not run twice", nil, (*suite).createAgain},
		{"update: labels change", nil, (*suite).update},
		{"notifications: the pod's status comes by WatchPods", func(s *suite) bool { return s.c.Capabilities().GetPodNotifier() }, (*suite).notifications},
		{"logs", func(s *suite) bool { return s.c.Capabilities().GetLogs() }, (*suite).logs},
		{"exec: an exit code comes back", func(s *suite) bool { return s.c.Capabilities().GetExec() }, (*suite).exec},
		{"stats: the summary is the node's", func(s *suite) bool { return s.c.Capabilities().GetStats() }, (*suite).stats},
		{"ephemeral containers: one added by an update runs", func(s *suite) bool { return s.c.Capabilities().GetEphemeralContainers() }, (*suite).ephemeral},
		{"reconnect: a new connection finds the pod (restart reconcile)", nil, (*suite).reconnect},
		{"delete: the pod stops within its grace period", nil, (*suite).delete},
	}
	var out []CheckResult
	failed := false
	for _, ch := range checks {
		r := CheckResult{Name: ch.name}
		switch {
		case ch.need != nil && !ch.need(s):
			r.Skipped = true
		case failed && ch.name != "delete: the pod stops within its grace period":
			r.Err = errors.New("not run: an earlier check failed")
		default:
			start := time.Now()
			r.Err = ch.run(s, ctx)
			r.Took = time.Since(start)
			failed = failed || r.Err != nil
		}
		out = append(out, r)
		fmt.Fprintln(cfg.Log, r)
	}
	return out, nil
}

func (r CheckResult) String() string {
	switch {
	case r.Skipped:
		return "SKIP  " + r.Name + " (not claimed in Capabilities)"
	case r.Err != nil:
		return "FAIL  " + r.Name + ": " + r.Err.Error()
	}
	return fmt.Sprintf("PASS  %s (%s)", r.Name, r.Took.Round(time.Millisecond))
}

type suite struct {
	c        *remote.Client
	cfg      Config
	pod      *corev1.Pod
	resolved *provider.ResolvedPod
}

func (s *suite) capabilities(ctx context.Context) error {
	caps := s.c.Capabilities()
	if caps.GetEncoding() != 0 && caps.GetEncoding() != 1 && caps.GetEncoding() != 2 {
		return fmt.Errorf("unknown encoding %v", caps.GetEncoding())
	}
	return nil
}

func (s *suite) unknownPod(ctx context.Context) error {
	_, err := s.c.GetPod(ctx, "vkubelet-conformance", "no-such-pod")
	if !errdefs.IsNotFound(err) {
		return fmt.Errorf("GetPod of an unknown pod: %v, want NOT_FOUND", err)
	}
	if _, err := s.c.GetPodStatus(ctx, "vkubelet-conformance", "no-such-pod"); !errdefs.IsNotFound(err) {
		return fmt.Errorf("GetPodStatus of an unknown pod: %v, want NOT_FOUND", err)
	}
	return nil
}

// waitStatus polls the pod's status every 500ms until ok says so, for at most
// Timeout.
func (s *suite) waitStatus(ctx context.Context, what string, ok func(*corev1.PodStatus, error) bool) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, s.cfg.Timeout, true, func(context.Context) (bool, error) {
		// ctx, not the poll's: a call under way when the time is up may end.
		st, err := s.c.GetPodStatus(ctx, s.pod.Namespace, s.pod.Name)
		if ok(st, err) {
			return true, nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = string(st.Phase)
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: not after %s (last: %s)", what, s.cfg.Timeout, last)
	}
	return err
}

func running(st *corev1.PodStatus, err error) bool {
	return err == nil && st.Phase == corev1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
}

// createBackoff paces create's retries: from 200ms, doubling, up to 5s.
var createBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}

// create retries a failed create for at most Timeout, as the agent does (with
// back-off), unless the provider refuses the pod (INVALID_ARGUMENT): a back end
// may need a moment (a cluster's new namespace without its ServiceAccount yet,
// say).
func (s *suite) create(ctx context.Context) error {
	var err error
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_ = createBackoff.DelayFunc().Until(tctx, true, true, func(context.Context) (bool, error) {
		// ctx, not tctx: a call under way when the time is up may end.
		err = s.c.CreateResolvedPod(ctx, s.resolved)
		if err == nil || errdefs.IsInvalidInput(err) {
			return true, nil
		}
		fmt.Fprintf(s.cfg.Log, "      create failed, retrying: %v\n", err)
		return false, nil
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return err
	}
	return s.waitStatus(ctx, "Running with its container running", running)
}

func (s *suite) list(ctx context.Context) error {
	pods, err := s.c.GetPods(ctx)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.UID == s.pod.UID {
			return nil
		}
	}
	return fmt.Errorf("ListPods (%d pods) lacks the pod %s", len(pods), s.pod.UID)
}

func (s *suite) createAgain(ctx context.Context) error {
	st, err := s.c.GetPodStatus(ctx, s.pod.Namespace, s.pod.Name)
	if err != nil {
		return err
	}
	before := st.ContainerStatuses[0].ContainerID
	_ = s.c.CreateResolvedPod(ctx, s.resolved) // an error (already exists) is fine
	time.Sleep(time.Second)
	st, err = s.c.GetPodStatus(ctx, s.pod.Namespace, s.pod.Name)
	if err != nil {
		return err
	}
	if !running(st, nil) || st.ContainerStatuses[0].ContainerID != before {
		return fmt.Errorf("after a second create the container is %s (%s), was %s", st.ContainerStatuses[0].ContainerID, st.Phase, before)
	}
	return nil
}

func (s *suite) update(ctx context.Context) error {
	s.pod.Labels["conformance"] = "updated"
	if err := s.c.UpdateResolvedPod(ctx, s.resolved); err != nil && !errdefs.IsNotImplemented(err) {
		return err
	}
	return s.waitStatus(ctx, "still Running after the update", running)
}

func (s *suite) notifications(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	got := make(chan struct{}, 1)
	s.c.NotifyPods(ctx, func(p *corev1.Pod) {
		if p.UID == s.pod.UID && p.Status.Phase == corev1.PodRunning {
			select {
			case got <- struct{}{}:
			default:
			}
		}
	})
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		return errors.New("WatchPods did not send the running pod (it must send every pod when the stream opens)")
	}
}

func (s *suite) logs(ctx context.Context) error {
	rc, err := s.c.GetContainerLogs(ctx, s.pod.Namespace, s.pod.Name, "main", provider.ContainerLogOpts{})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	if err != nil {
		return err
	}
	_, err = s.c.GetContainerLogs(ctx, s.pod.Namespace, s.pod.Name, "no-such-container", provider.ContainerLogOpts{})
	if !errdefs.IsNotFound(err) && !errdefs.IsInvalidInput(err) {
		return fmt.Errorf("logs of an unknown container: %v, want NOT_FOUND or INVALID_ARGUMENT", err)
	}
	return nil
}

func (s *suite) exec(ctx context.Context) error {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := s.c.RunInContainer(ctx, s.pod.Namespace, s.pod.Name, "main", []string{"echo", "conformance"}, &bufferIO{out: &out})
	var ee *provider.ExecError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	return nil
}

func (s *suite) stats(ctx context.Context) error {
	sum, err := s.c.GetStatsSummary(ctx)
	if err != nil {
		return err
	}
	// The pod's own figures may be missing (a back end that cannot measure them
	// yet); the summary must still be the node's.
	if sum.Node.NodeName != s.cfg.NodeName {
		return fmt.Errorf("the summary is of node %q, want %q", sum.Node.NodeName, s.cfg.NodeName)
	}
	return nil
}

// ephemeral adds an ephemeral container to the running pod as the agent does for
// `kubectl debug`: an update whose spec.ephemeralContainers has a new entry, its
// environment in the request's env. It must be reported in
// ephemeralContainerStatuses as running or, if its command was quick, as ended,
// and leave the pod's own container as it was.
func (s *suite) ephemeral(ctx context.Context) error {
	st, err := s.c.GetPodStatus(ctx, s.pod.Namespace, s.pod.Name)
	if err != nil {
		return err
	}
	before := st.ContainerStatuses[0].ContainerID
	s.pod.Spec.EphemeralContainers = append(s.pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: s.cfg.Image, Command: s.cfg.Command,
			ImagePullPolicy: corev1.PullIfNotPresent},
		TargetContainerName: "main",
	})
	s.resolved.Env["debugger"] = []corev1.EnvVar{{Name: "CONFORMANCE", Value: "ephemeral"}}
	if err := s.c.UpdateResolvedPod(ctx, s.resolved); err != nil {
		return err
	}
	err = s.waitStatus(ctx, "the ephemeral container reported running", func(st *corev1.PodStatus, err error) bool {
		if err != nil {
			return false
		}
		for _, cs := range st.EphemeralContainerStatuses {
			if cs.Name == "debugger" {
				return cs.State.Running != nil || cs.State.Terminated != nil
			}
		}
		return false
	})
	if err != nil {
		return err
	}
	st, err = s.c.GetPodStatus(ctx, s.pod.Namespace, s.pod.Name)
	if err != nil {
		return err
	}
	if !running(st, nil) {
		return fmt.Errorf("after the ephemeral container the pod is %s, its container not running", st.Phase)
	}
	if id := st.ContainerStatuses[0].ContainerID; id != before {
		return fmt.Errorf("after the ephemeral container the pod's container is %s, was %s", id, before)
	}
	return nil
}

func (s *suite) reconnect(ctx context.Context) error {
	c, err := remote.New(ctx, s.cfg.Remote, s.cfg.NodeName, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.GetPod(ctx, s.pod.Namespace, s.pod.Name)
	if err != nil {
		return err
	}
	if p.UID != s.pod.UID {
		return fmt.Errorf("the pod came back with UID %s, want %s", p.UID, s.pod.UID)
	}
	return nil
}

func (s *suite) delete(ctx context.Context) error {
	start := time.Now()
	s.pod.DeletionTimestamp = ptr.To(metav1.Now())
	s.pod.DeletionGracePeriodSeconds = ptr.To(int64(2))
	if err := s.c.DeletePod(ctx, s.pod); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	err := s.waitStatus(ctx, "stopped", func(st *corev1.PodStatus, err error) bool {
		if errdefs.IsNotFound(err) {
			return true
		}
		if err != nil || len(st.ContainerStatuses) == 0 {
			return false
		}
		return st.ContainerStatuses[0].State.Terminated != nil
	})
	if err != nil {
		return err
	}
	if took := time.Since(start); took > 2*time.Second+30*time.Second {
		return fmt.Errorf("stopping took %s with a grace period of 2s", took)
	}
	return nil
}

// bufferIO is an exec session with stdout only.
type bufferIO struct{ out *bytes.Buffer }

func (b *bufferIO) Stdin() io.Reader                 { return nil }
func (b *bufferIO) Stdout() io.WriteCloser           { return nopCloser{b.out} }
func (b *bufferIO) Stderr() io.WriteCloser           { return nil }
func (b *bufferIO) TTY() bool                        { return false }
func (b *bufferIO) Resize() <-chan provider.TermSize { return nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Failed reports whether any check failed, naming them.
func Failed(results []CheckResult) error {
	var names []string
	for _, r := range results {
		if r.Err != nil {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%d checks failed: %s", len(names), strings.Join(names, "; "))
}
