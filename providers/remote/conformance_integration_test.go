package remote_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/slurmenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/cri"
	"github.com/vkubelet/vkubelet/providers/kube"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/remote"
	"github.com/vkubelet/vkubelet/providers/remote/conformance"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// serve serves p on a unix socket until the test ends and returns the endpoint.
func serve(t testing.TB, p provider.PodLifecycleHandler, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	serveAt(t, sock, p, name)
	return "unix://" + sock
}

// serveAt serves p on a unix socket at sock until stop is called or the test
// ends. Once stopped, sock may be served again: a provider that restarts.
func serveAt(t testing.TB, sock string, p provider.PodLifecycleHandler, name string) (stop func()) {
	t.Helper()
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- remote.NewServer(ctx, p, name, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(ctx, l, remote.ServeOptions{})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serving %s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func runConformance(t *testing.T, cfg conformance.Config) {
	t.Helper()
	var log bytes.Buffer
	cfg.Log = &log
	cfg.Remote.Timeout.Duration = 30 * time.Second
	results, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance of %s:\n%s", cfg.Remote.Endpoint, log.String())
	if err := conformance.Failed(results); err != nil {
		t.Error(err)
	}
}

// The providers we ship pass the conformance suite over the protocol: the mock,
// the CRI provider with real containers, the kube provider (pods in a cluster),
// and the Python example.
func TestShippedProvidersPassTheConformanceSuite(t *testing.T) {
	t.Run("mock", func(t *testing.T) {
		p, err := mock.New(mock.Config{}, "conformance")
		if err != nil {
			t.Fatal(err)
		}
		runConformance(t, conformance.Config{Remote: remote.Config{Endpoint: serve(t, p, "mock")}, NodeName: "conformance"})
	})
	t.Run("cri", func(t *testing.T) {
		testenv.Require(t, crienv.Available())
		env, err := crienv.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer env.Stop()
		p, err := cri.New(context.Background(), cri.Config{RuntimeEndpoint: env.Socket, RootDir: t.TempDir(),
			BackoffBase: cri.Duration{Duration: time.Second}, SyncInterval: cri.Duration{Duration: 200 * time.Millisecond}}, "conformance")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		runConformance(t, conformance.Config{Remote: remote.Config{Endpoint: serve(t, p, "cri")}, NodeName: "conformance",
			Image: env.Busybox, Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}})
	})
	t.Run("kube", func(t *testing.T) {
		// The kube provider's target is the test's cluster itself, where a mock
		// node (untainted) runs the pods it creates.
		cp := testenv.ControlPlane(t)
		worker := nodetest.MockConfig(t, "conformance-worker", mock.Config{})
		worker.DisableTaint = true
		worker.SelfSignedServingCert, worker.ApproveServingCSR = false, true // logs and exec through the API server
		nodetest.Run(t, worker)
		defer func() {
			_ = testenv.Client(t).CoreV1().Nodes().Delete(context.Background(), "conformance-worker", metav1.DeleteOptions{})
		}()
		p, err := kube.New(context.Background(), kube.Config{Kubeconfig: cp.KubeconfigPath, ClusterID: "conf",
			PingTimeout: providerutil.Duration{Duration: 5 * time.Second}}, "conformance")
		if err != nil {
			t.Fatal(err)
		}
		runConformance(t, conformance.Config{Remote: remote.Config{Endpoint: serve(t, p, "kube")}, NodeName: "conformance"})
	})
	t.Run("slurm", func(t *testing.T) {
		// Pods as jobs of a real Slurm, their containers run by podman.
		testenv.Require(t, slurmenv.Available())
		env, err := slurmenv.Start(context.Background(), slurmenv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer env.Stop()
		reg, err := crienv.StartRegistry()
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Stop()
		cfg, err := env.ProviderConfig(reg.Registry)
		if err != nil {
			t.Fatal(err)
		}
		p, err := slurm.New(cfg, "conformance", nil)
		if err != nil {
			t.Fatal(err)
		}
		runConformance(t, conformance.Config{Remote: remote.Config{Endpoint: serve(t, p, "slurm")}, NodeName: "conformance",
			Image: reg.Busybox, Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}})
	})
	t.Run("python", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "vkcp")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		sock := filepath.Join(dir, "py.sock")
		py := exec.Command(debianPython, "../../examples/python-provider/provider.py", "--proto", "api/v1alpha1/provider.proto", "--listen", "unix://"+sock)
		var out bytes.Buffer
		py.Stdout, py.Stderr = &out, &out
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = py.Process.Kill(); _ = py.Wait() }()
		runConformance(t, conformance.Config{Remote: remote.Config{Endpoint: "unix://" + sock}, NodeName: "conformance"})
		if t.Failed() {
			t.Logf("python provider:\n%s", strings.TrimSpace(out.String()))
		}
	})
}

// notFoundless loses the NOT_FOUND class of errors, as a careless provider would.
type notFoundless struct{ *mock.Provider }

func (p notFoundless) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod, err := p.Provider.GetPod(ctx, ns, name)
	if err != nil {
		return nil, errors.New("something went wrong")
	}
	return pod, nil
}

// The suite fails a provider that breaks the contract, and says which check.
func TestTheConformanceSuiteFailsABrokenProvider(t *testing.T) {
	p, err := mock.New(mock.Config{}, "conformance")
	if err != nil {
		t.Fatal(err)
	}
	results, err := conformance.Run(context.Background(), conformance.Config{
		Remote: remote.Config{Endpoint: serve(t, notFoundless{p}, "broken"), Timeout: providerutil.Duration{Duration: 10 * time.Second}}, NodeName: "conformance"})
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Failed(results); err == nil || !strings.Contains(err.Error(), "an unknown pod is NotFound") {
		t.Errorf("the suite said %v of a provider without NOT_FOUND", err)
	}
}

// ephemeralClaimer claims ephemeral containers, but is the mock, which never
// reports one.
type ephemeralClaimer struct{ *mock.Provider }

func (ephemeralClaimer) RunsEphemeralContainers() bool { return true }

// The suite fails a provider that claims ephemeral containers and does not run
// them.
func TestTheConformanceSuiteFailsAProviderThatClaimsEphemeralContainersItDoesNotRun(t *testing.T) {
	p, err := mock.New(mock.Config{}, "conformance")
	if err != nil {
		t.Fatal(err)
	}
	results, err := conformance.Run(context.Background(), conformance.Config{
		Remote: remote.Config{Endpoint: serve(t, ephemeralClaimer{p}, "claimer")}, NodeName: "conformance", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Failed(results); err == nil || !strings.Contains(err.Error(), "ephemeral containers") {
		t.Errorf("the suite said %v of a provider that claims ephemeral containers it does not run", err)
	}
}
