package remote_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// ephemeralRunner is the mock saying whether it runs ephemeral containers, as a
// provider standing for another one would: the interface alone is no promise.
type ephemeralRunner struct {
	*mock.Provider
	runs atomic.Bool
}

func (p *ephemeralRunner) RunsEphemeralContainers() bool { return p.runs.Load() }

func newMock(t *testing.T) *mock.Provider {
	t.Helper()
	m, err := mock.New(mock.Config{}, "ephemeral")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func connect(t *testing.T, endpoint string) *remote.Client {
	t.Helper()
	c, err := remote.New(context.Background(), remote.Config{Endpoint: endpoint, Timeout: providerutil.Duration{Duration: 10 * time.Second}}, "ephemeral", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The server announces ephemeral containers for a provider that implements
// EphemeralContainerRunner and says it runs them, and for no other; the client, an
// EphemeralContainerRunner itself, answers what the provider announced.
func TestEphemeralContainersAreAnnouncedOnlyByAProviderThatRunsThem(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider func(*mock.Provider) provider.PodLifecycleHandler
		want     bool
	}{
		{"no EphemeralContainerRunner", func(m *mock.Provider) provider.PodLifecycleHandler { return m }, false},
		{"a runner that says no", func(m *mock.Provider) provider.PodLifecycleHandler { return &ephemeralRunner{Provider: m} }, false},
		{"a runner that says yes", func(m *mock.Provider) provider.PodLifecycleHandler {
			r := &ephemeralRunner{Provider: m}
			r.runs.Store(true)
			return r
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, serve(t, tc.provider(newMock(t)), "mock"))
			if got := c.Capabilities().GetEphemeralContainers(); got != tc.want {
				t.Errorf("Capabilities: ephemeral_containers = %v, want %v", got, tc.want)
			}
			var runner provider.EphemeralContainerRunner = c
			if got := runner.RunsEphemeralContainers(); got != tc.want {
				t.Errorf("the client's RunsEphemeralContainers() = %v, want %v", got, tc.want)
			}
		})
	}
}

// The server announces in-place resize for a provider that says it resizes (the
// mock does), and for no other; the client answers what was announced.
func TestInPlaceResizeIsAnnouncedOnlyByAProviderThatResizes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider func(*mock.Provider) provider.PodLifecycleHandler
		want     bool
	}{
		{"the mock", func(m *mock.Provider) provider.PodLifecycleHandler { return m }, true},
		{"a provider without InPlaceResizer", func(m *mock.Provider) provider.PodLifecycleHandler { return plain{m} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, serve(t, tc.provider(newMock(t)), "mock"))
			if got := c.Capabilities().GetInPlaceResize(); got != tc.want {
				t.Errorf("Capabilities: in_place_resize = %v, want %v", got, tc.want)
			}
			if got := provider.ResizesInPlace(c); got != tc.want {
				t.Errorf("the client's ResizesInPlace() = %v, want %v", got, tc.want)
			}
		})
	}
}

// plain hides the mock's optional interfaces.
type plain struct{ provider.PodLifecycleHandler }

// The client's answer is the provider's last announcement, asked again when the
// provider comes back: one restarted as a version that does not run ephemeral
// containers is no longer said to run them, so the pod controller stops sending
// it new ones. This holds whether the client's pod notifications were watching
// when the provider went away or first open their stream on the restarted one
// (both happen here, as the goroutines fall).
func TestEphemeralContainersAreAskedAgainWhenTheProviderComesBack(t *testing.T) {
	dir, err := os.MkdirTemp("", "vke") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	before := &ephemeralRunner{Provider: newMock(t)}
	before.runs.Store(true)
	stop := serveAt(t, sock, before, "v1")
	c := connect(t, "unix://"+sock)
	// The pod notifications are what notices, in the agent, that the provider went
	// away, and what asks for its capabilities when it is back.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.NotifyPods(ctx, func(*corev1.Pod) {})
	if !c.RunsEphemeralContainers() {
		t.Fatal("the client says the provider does not run ephemeral containers; it announced it does")
	}

	stop()
	serveAt(t, sock, &ephemeralRunner{Provider: newMock(t)}, "v2")
	eventually.True(t, 60*time.Second, func() (bool, string) {
		return !c.RunsEphemeralContainers(), "the client still says the restarted provider runs ephemeral containers"
	})
}
