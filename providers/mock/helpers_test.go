package mock

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
)

// t0 is when every fake clock of these tests starts.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// waitTimeout bounds every wait for something another goroutine does.
const waitTimeout = 10 * time.Second

func newTestProvider(t *testing.T, cfg Config, opts ...Option) (*Provider, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	opts = append([]Option{WithClock(clk), WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	p, err := New(cfg, "node-1", opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, clk
}

func testPod(name string, uid types.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox:1.36",
				Command: []string{"sh", "-c"},
				Args:    []string{"line one", "line two", "line three"},
			}},
		},
		Status: corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort},
	}
}

// notifications starts the provider's notifications into a channel, for the
// duration of the test.
func notifications(t *testing.T, p *Provider) <-chan *corev1.Pod {
	t.Helper()
	ch := make(chan *corev1.Pod, 10_000)
	notifyPods(t, p, func(pod *corev1.Pod) { ch <- pod })
	return ch
}

// notifyPods calls p.NotifyPods for the duration of the test, and at its end waits
// for the scheduler goroutine to be done, so that it writes no file after the test.
func notifyPods(t *testing.T, p *Provider, notify func(*corev1.Pod)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.NotifyPods(ctx, notify)
	p.mu.Lock()
	s := p.sched
	p.mu.Unlock()
	t.Cleanup(func() {
		cancel()
		eventually.TrueEvery(t, waitTimeout, time.Millisecond, func() (bool, string) {
			return !schedulerRuns(p, s), "the scheduler goroutine did not return when its context ended"
		})
	})
}

// schedulerRuns reports whether s's goroutine runs.
func schedulerRuns(p *Provider, s *scheduler) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.running
}

// nextNotification returns the next pod notified, failing the test after waitTimeout.
func nextNotification(t *testing.T, ch <-chan *corev1.Pod) *corev1.Pod {
	t.Helper()
	return eventually.Receive(t, ch, waitTimeout, "a pod notification")
}

// waitForWaiter waits until the scheduler has set its timer on the fake clock, so
// that a Step is seen by the timer rather than by the next loop's first check. Both
// work; waiting only makes the tests exercise the timer path.
func waitForWaiter(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	eventually.TrueEvery(t, waitTimeout, time.Millisecond, func() (bool, string) {
		return clk.HasWaiters(), "the scheduler set no timer"
	})
}

func mustStatus(t *testing.T, p *Provider, name string) *corev1.PodStatus {
	t.Helper()
	s, err := p.GetPodStatus(context.Background(), "default", name)
	if err != nil {
		t.Fatalf("GetPodStatus %s: %v", name, err)
	}
	return s
}

// fakeAttach is a provider.AttachIO over in-memory streams.
type fakeAttach struct {
	stdin  io.Reader
	stdout io.WriteCloser
	tty    bool
	resize chan provider.TermSize
}

func (a *fakeAttach) Stdin() io.Reader                 { return a.stdin }
func (a *fakeAttach) Stdout() io.WriteCloser           { return a.stdout }
func (a *fakeAttach) Stderr() io.WriteCloser           { return nil }
func (a *fakeAttach) TTY() bool                        { return a.tty }
func (a *fakeAttach) Resize() <-chan provider.TermSize { return a.resize }
