package cri

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
)

// env is the package's containerd and registry; nil under -short.
var env *crienv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if err := crienv.Available(); err != nil {
		if testenv.InCI() {
			fmt.Fprintf(os.Stderr, "cri tests: %v (CI runs every test: make test installs what they need)\n", err)
			os.Exit(1)
		}
		// Every test that needs the runtime skips, saying why (needRuntime).
		unavailable = err
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e, err := crienv.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri tests: %v\n", err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	e.Stop()
	os.Exit(code)
}

// unavailable says why containerd cannot run here (outside CI), or is nil.
var unavailable error

// needRuntime skips the test under -short, or where containerd cannot run.
func needRuntime(t *testing.T) {
	t.Helper()
	if unavailable != nil {
		testenv.Require(t, unavailable)
	}
	if env == nil {
		t.Skip("integration test: needs containerd (run without -short)")
	}
}

func testConfig(t *testing.T) Config {
	return Config{
		RuntimeEndpoint: env.Socket,
		RootDir:         t.TempDir(),
		Network:         NetworkCNI,
		BackoffBase:     Duration{Duration: 200 * time.Millisecond},
		BackoffMax:      Duration{Duration: 2 * time.Second},
		SyncInterval:    Duration{Duration: 100 * time.Millisecond},
	}
}

var nodeNameRE = regexp.MustCompile(`[^a-z0-9-]+`)

func nodeName(t *testing.T) string {
	return "n-" + nodeNameRE.ReplaceAllString(strings.ToLower(t.Name()), "-")
}

// notifications records what the provider pushed through NotifyPods.
type notifications struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (n *notifications) add(p *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = append(n.pods, p)
}

func (n *notifications) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pods)
}

// newProvider starts a provider on the test's own node name; at the end of the test
// it deletes what is left and closes.
func newProvider(t *testing.T, cfg Config) (*Provider, *notifications) {
	t.Helper()
	p, err := New(context.Background(), cfg, nodeName(t), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n := &notifications{}
	p.NotifyPods(context.Background(), n.add)
	t.Cleanup(func() { cleanup(t, p) })
	return p, n
}

// cleanup deletes every pod of p at once and waits until they are gone, then closes p.
func cleanup(t *testing.T, p *Provider) {
	ctx := context.Background()
	pods, _ := p.GetPods(ctx)
	for _, pod := range pods {
		pod.DeletionGracePeriodSeconds = ptr.To(int64(0))
		_ = p.DeletePod(ctx, pod)
	}
	for _, pod := range pods {
		waitGone(t, p, pod)
	}
	p.Close()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// busyboxPod is a pod with one container "main" running script with sh.
func busyboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uuid.NewUUID(), CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           env.Busybox,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

// sleepForever is a script that runs until SIGTERM, on which it exits 0 at once.
const sleepForever = `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`

// waitFor polls cond every 50ms until it holds, naming what in the failure once
// timeout has passed.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.TrueEvery(t, timeout, 50*time.Millisecond, func() (bool, string) {
		ok, state := cond()
		return ok, what + "; last: " + state
	})
}

// waitStatus waits until the pod's status satisfies cond and returns it.
func waitStatus(t *testing.T, p *Provider, pod *corev1.Pod, timeout time.Duration, what string, cond func(*corev1.PodStatus) bool) *corev1.PodStatus {
	t.Helper()
	var st *corev1.PodStatus
	waitFor(t, timeout, what, func() (bool, string) {
		s, err := p.GetPodStatus(context.Background(), pod.Namespace, pod.Name)
		if err != nil {
			return false, err.Error()
		}
		st = s
		return cond(s), describe(s)
	})
	return st
}

func waitRunningReady(t *testing.T, p *Provider, pod *corev1.Pod) *corev1.PodStatus {
	t.Helper()
	return waitStatus(t, p, pod, 60*time.Second, "Running and Ready", func(s *corev1.PodStatus) bool {
		return s.Phase == corev1.PodRunning && condition(s, corev1.PodReady) == corev1.ConditionTrue
	})
}

func waitGone(t *testing.T, p *Provider, pod *corev1.Pod) {
	t.Helper()
	waitFor(t, 60*time.Second, "pod "+pod.Name+" gone", func() (bool, string) {
		_, err := p.GetPod(context.Background(), pod.Namespace, pod.Name)
		if err == nil {
			return false, "still there"
		}
		return errorsIsNotFound(err), err.Error()
	})
}

func errorsIsNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

func condition(s *corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func describe(s *corev1.PodStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s msg=%q", s.Phase, s.Message)
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s restarts=%d ready=%v", cs.Name, cs.RestartCount, cs.Ready)
		switch {
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Running != nil:
			b.WriteString(" running")
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated %d %s", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
		b.WriteString("]")
	}
	return b.String()
}

// attachIO is a provider.AttachIO over buffers.
type attachIO struct {
	stdin          io.Reader
	stdout, stderr *testenv.Buffer
}

func newAttachIO(stdin string) *attachIO {
	a := &attachIO{stdout: &testenv.Buffer{}, stderr: &testenv.Buffer{}}
	if stdin != "" {
		a.stdin = strings.NewReader(stdin)
	}
	return a
}

func (a *attachIO) Stdin() io.Reader {
	if a.stdin == nil {
		return nil
	}
	return a.stdin
}
func (a *attachIO) Stdout() io.WriteCloser           { return a.stdout }
func (a *attachIO) Stderr() io.WriteCloser           { return a.stderr }
func (a *attachIO) TTY() bool                        { return false }
func (a *attachIO) Resize() <-chan provider.TermSize { return nil }

// execOut runs cmd in the pod's container and returns its stdout and error.
func execOut(t *testing.T, p *Provider, pod *corev1.Pod, container string, cmd ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAttachIO("")
	err := p.RunInContainer(ctx, pod.Namespace, pod.Name, container, cmd, a)
	return a.stdout.String(), err
}

// sandboxes lists the runtime's sandboxes of the test's node.
func sandboxes(t *testing.T) []*runtimeapi.PodSandbox {
	t.Helper()
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelNode: nodeName(t)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Items
}

// containers lists the runtime's containers of the test's node.
func containers(t *testing.T) []*runtimeapi.Container {
	t.Helper()
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListContainers(context.Background(), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelNode: nodeName(t)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Containers
}

func readAll(t *testing.T, rc io.ReadCloser) string {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading logs: %v", err)
	}
	return string(b)
}
