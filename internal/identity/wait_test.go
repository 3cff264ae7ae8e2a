package identity

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// fakeManager is a certificate manager whose certificate comes at the
// issuedAt-th look (never if 0).
type fakeManager struct {
	issuedAt int32
	looks    atomic.Int32
	started  atomic.Bool
	stop     sync.Once
	stopped  chan struct{}
}

func newFakeManager(issuedAt int32) *fakeManager {
	return &fakeManager{issuedAt: issuedAt, stopped: make(chan struct{})}
}

func (m *fakeManager) Start()              { m.started.Store(true) }
func (m *fakeManager) Stop()               { m.stop.Do(func() { close(m.stopped) }) }
func (m *fakeManager) ServerHealthy() bool { return true }
func (m *fakeManager) Current() *tls.Certificate {
	if n := m.looks.Add(1); m.issuedAt > 0 && n >= m.issuedAt {
		return &tls.Certificate{}
	}
	return nil
}

func (m *fakeManager) isStopped() bool {
	select {
	case <-m.stopped:
		return true
	default:
		return false
	}
}

func (m *fakeManager) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case <-m.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager was not stopped")
	}
}

func quietWait(timeout time.Duration) awaited {
	return awaited{node: "vk", kind: "serving", signer: certificatesv1.KubeletServingSignerName, timeout: timeout,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), waiting: "waiting"}
}

func TestStartManagerReturnsOnceTheCertificateComesAndKeepsItRunningUntilCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := newFakeManager(3)
	if err := startManager(ctx, m, quietWait(0)); err != nil {
		t.Fatal(err)
	}
	if !m.started.Load() || m.isStopped() {
		t.Fatalf("started %v, stopped %v: want a running manager", m.started.Load(), m.isStopped())
	}
	cancel()
	m.waitStopped(t)
}

func TestStartManagerGivesUpAfterItsTimeoutNamingTheCSR(t *testing.T) {
	for _, waiting := range []string{"waiting for the kubelet-serving CSR to be approved", ""} {
		var log bytes.Buffer
		a := quietWait(300 * time.Millisecond)
		a.log, a.waiting = slog.New(slog.NewTextHandler(&log, nil)), waiting
		m := newFakeManager(0)
		err := startManager(context.Background(), m, a)
		if err == nil || !strings.Contains(err.Error(), "no serving certificate after 300ms: is the kubernetes.io/kubelet-serving CSR of node vk approved?") {
			t.Fatalf("err = %v", err)
		}
		if !m.isStopped() {
			t.Error("the manager runs on after the node gave up")
		}
		if got := strings.Count(log.String(), "waiting for"); waiting != "" && got != 1 || waiting == "" && got != 0 {
			t.Errorf("waiting %q logged %d times in 300ms: %s", waiting, got, log.String())
		}
	}
}

func TestStartManagerStopsWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	m := newFakeManager(0)
	err := startManager(ctx, m, quietWait(time.Hour))
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "no serving certificate") {
		t.Fatalf("err = %v, want the context's own error", err)
	}
	m.waitStopped(t)
}
