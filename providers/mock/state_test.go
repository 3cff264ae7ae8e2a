package mock

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestStateFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		StartDelay: Duration{Duration: 10 * time.Second},
		StopDelay:  Duration{Duration: 20 * time.Second},
		StateFile:  filepath.Join(dir, "state.json"),
	}
	clk := testingclock.NewFakeClock(t0)
	open := func() *Provider {
		t.Helper()
		p, err := New(cfg, "node-1", WithClock(clk), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return p
	}
	ctx := context.Background()

	p := open()
	for _, pod := range []*corev1.Pod{testPod("pending", "uid-p"), testPod("running", "uid-r"), testPod("deleting", "uid-d"), testPod("gone", "uid-g")} {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	// At 10s uid-p is deleted (it stops at 30s); at 35s it is created again (it runs
	// from 45s), deleting and gone are deleted (they stop at 55s and 36s).
	clk.Step(10 * time.Second)
	if err := p.DeletePod(ctx, testPod("pending", "uid-p")); err != nil {
		t.Fatal(err)
	}
	clk.Step(25 * time.Second)
	if err := p.CreatePod(ctx, testPod("pending", "uid-p")); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, testPod("deleting", "uid-d")); err != nil {
		t.Fatal(err)
	}
	gone := testPod("gone", "uid-g")
	gone.DeletionGracePeriodSeconds = ptr.To[int64](1)
	if err := p.DeletePod(ctx, gone); err != nil {
		t.Fatal(err)
	}
	// The process is killed; it restarts at 40s.
	clk.Step(5 * time.Second)
	q := open()

	byName := map[string]*corev1.Pod{}
	for _, pod := range q.Pods() {
		byName[pod.Name] = pod
	}
	if len(byName) != 3 || byName["gone"] != nil {
		t.Fatalf("restored pods %v, want pending, running and deleting", keys(byName))
	}
	if s := byName["pending"].Status; s.Phase != corev1.PodPending {
		t.Errorf("restored pending pod: phase %s", s.Phase)
	}
	if s := byName["running"].Status; s.Phase != corev1.PodRunning || s.PodIP != "10.244.0.2" {
		t.Errorf("restored running pod: phase %s podIP %s, want Running 10.244.0.2", s.Phase, s.PodIP)
	}
	if s := byName["deleting"].Status; s.Phase != corev1.PodRunning || s.ContainerStatuses[0].State.Running == nil {
		t.Errorf("restored deleting pod: phase %s state %+v, want still running", s.Phase, s.ContainerStatuses[0].State)
	}
	if args := byName["running"].Spec.Containers[0].Args; len(args) != 3 || args[1] != "line two" {
		t.Errorf("restored pod spec lost its args: %v", args)
	}
	if n := q.CreateCount("uid-p"); n != 2 {
		t.Errorf("restored CreateCount(uid-p) = %d, want 2", n)
	}
	if n := q.DeleteCalls("uid-d"); n != 1 {
		t.Errorf("restored DeleteCalls(uid-d) = %d, want 1", n)
	}

	// Re-creating a restored pod is a no-op, and the IP counter goes on.
	if err := q.CreatePod(ctx, testPod("running", "uid-r")); err != nil {
		t.Fatal(err)
	}
	if n := q.CreateCount("uid-r"); n != 1 {
		t.Errorf("CreateCount(uid-r) after a repeated create = %d, want 1", n)
	}
	if err := q.CreatePod(ctx, testPod("new", "uid-n")); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	if ip := mustStatus(t, q, "new").PodIP; ip != "10.244.0.6" {
		t.Errorf("podIP of a pod created after the restart = %s, want 10.244.0.6", ip)
	}
	// The deleting pod goes on stopping on schedule (at 55s).
	clk.Step(5 * time.Second)
	if _, err := q.GetPod(ctx, "default", "deleting"); !errdefs.IsNotFound(err) {
		t.Errorf("restored deleting pod after its stop: %v, want NotFound", err)
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("state directory holds %d files, want only the state file (no temporary left)", len(entries))
	}
}

func TestStateFileRestoredPodsAreNotified(t *testing.T) {
	cfg := Config{StartDelay: Duration{Duration: time.Second}, StateFile: filepath.Join(t.TempDir(), "state.json")}
	p, clk := newTestProvider(t, cfg)
	if err := p.CreatePod(context.Background(), testPod("web", "uid-1")); err != nil {
		t.Fatal(err)
	}
	q, err := New(cfg, "node-1", WithClock(clk), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ch := notifications(t, q)
	clk.Step(time.Second)
	if pod := nextNotification(t, ch); pod.Name != "web" || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("notified %s in phase %s, want web Running", pod.Name, pod.Status.Phase)
	}
}

func TestStateFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"corrupt":     "{not json",
		"old version": `{"version": 99, "pods": []}`,
		"empty pod":   `{"version": 1, "pods": [{"podIP": "10.0.0.1"}]}`,
		"IPv6 podIP": `{"version": 1, "pods": [{"pod": {"metadata": {"namespace": "default", "name": "web", "uid": "u"}},` +
			`"podIP": "fd00::1", "hostIP": "10.0.0.1", "created": "2026-01-01T00:00:00Z", "running": "2026-01-01T00:00:01Z"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{StateFile: path}, "node-1")
			if err == nil {
				t.Fatal("New accepted a bad state file")
			}
			t.Log(err)
		})
	}
	t.Run("unwritable", func(t *testing.T) {
		p, _ := newTestProvider(t, Config{StateFile: filepath.Join(dir, "missing-dir", "state.json")})
		err := p.CreatePod(context.Background(), testPod("web", "uid-1"))
		if err == nil {
			t.Fatal("CreatePod succeeded though the state could not be saved")
		}
		if err := p.CreatePod(context.Background(), testPod("web", "uid-1")); err == nil {
			t.Error("a retried CreatePod succeeded though the state still could not be saved")
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
