package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
)

// fakeNodes stands for agent.Node: it counts starts per node, is ready at once
// unless told to fail, and runs until its context ends.
type fakeNodes struct {
	mu     sync.Mutex
	starts map[string]int
	fail   map[string]bool
	cfgs   map[string]agent.Config
}

func (f *fakeNodes) run(ctx context.Context, cfg agent.Config, ready func()) error {
	f.mu.Lock()
	f.starts[cfg.NodeName]++
	f.cfgs[cfg.NodeName] = cfg
	fail := f.fail[cfg.NodeName]
	f.mu.Unlock()
	if fail {
		return errors.New("provider unreachable")
	}
	ready()
	<-ctx.Done()
	return nil
}

func (f *fakeNodes) startsOf(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts[name]
}

func newFake() *fakeNodes {
	return &fakeNodes{starts: map[string]int{}, fail: map[string]bool{}, cfgs: map[string]agent.Config{}}
}

func TestApplyStartsStopsAndRestartsOnlyWhatChanged(t *testing.T) {
	fake := newFake()
	f := mustNew(t, Config{Run: fake.run})
	defer f.Stop()
	ctx := context.Background()
	a, b, c := nodeconfig.Node{Name: "a"}, nodeconfig.Node{Name: "b"}, nodeconfig.Node{Name: "c"}
	started, stopped := f.Apply(ctx, []nodeconfig.Node{a, b, c})
	if strings.Join(started, ",") != "a,b,c" || len(stopped) != 0 {
		t.Fatalf("first apply: started %v, stopped %v", started, stopped)
	}
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// b removed, c changed, d added; a untouched.
	c2 := nodeconfig.Node{Name: "c", Labels: map[string]string{"zone": "b"}}
	started, stopped = f.Apply(ctx, []nodeconfig.Node{a, c2, {Name: "d"}})
	if strings.Join(started, ",") != "c,d" || strings.Join(stopped, ",") != "b,c" {
		t.Errorf("second apply: started %v, stopped %v; want started c,d and stopped b,c", started, stopped)
	}
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.Running(); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Errorf("running %v", got)
	}
	for name, want := range map[string]int{"a": 1, "b": 1, "c": 2, "d": 1} {
		if got := fake.startsOf(name); got != want {
			t.Errorf("node %s started %d times, want %d", name, got, want)
		}
	}
	if fake.cfgs["c"].NodeLabels["zone"] != "b" {
		t.Errorf("the restarted node c runs with labels %v", fake.cfgs["c"].NodeLabels)
	}
}

// A node that fails is started again with back-off; the others are not disturbed
// and the process stays up, not ready.
func TestAFailingNodeIsRetriedWithoutStoppingTheOthers(t *testing.T) {
	fake := newFake()
	fake.fail["bad"] = true
	clk := clocktesting.NewFakeClock(time.Now())
	f := mustNew(t, Config{Run: fake.run, RestartBackoff: 10 * time.Millisecond, Clock: clk})
	defer f.Stop()
	f.Apply(context.Background(), []nodeconfig.Node{{Name: "good"}, {Name: "bad"}})
	for starts := 1; starts <= 3; starts++ {
		// The failed node waits out its back-off on the clock, and only then starts again.
		eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
			return clk.HasWaiters(), fmt.Sprintf("no back-off after start %d", starts)
		})
		if n := fake.startsOf("bad"); n != starts {
			t.Fatalf("the failing node was started %d times before back-off %d was over", n, starts)
		}
		clk.Step(time.Minute) // the cap of the back-off
	}
	eventually.TrueEvery(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		n := fake.startsOf("bad")
		return n == 4, fmt.Sprintf("the failing node was started %d times after three back-offs, want 4", n)
	})
	if n := fake.startsOf("good"); n != 1 {
		t.Errorf("the good node was started %d times", n)
	}
	if ok, why := f.Ready(); ok || why != "node bad is not ready" {
		t.Errorf("Ready() = %v, %q", ok, why)
	}
	rec := httptest.NewRecorder()
	f.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "node bad") {
		t.Errorf("/readyz: %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	f.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/healthz: %d", rec.Code)
	}
}

func TestTheCommandLineWinsOverTheFileWhereItWasGiven(t *testing.T) {
	base := agent.Config{Provider: "mock", ProviderConfig: "/flag.json", KubeletPort: 10250,
		CertDir: "/var/lib/vkubelet", MetricsAddr: "127.0.0.1:1", HealthzAddr: ":2", KubeAPIQPS: 50}
	n := nodeconfig.Node{Name: "hpc", Provider: "kube", ProviderConfig: "/file.json",
		DisableProviderTaint: ptr.To(true), KubeletPort: ptr.To(int32(10260)), Labels: map[string]string{"a": "b"}}

	// A Run of the test's own: no agents, so no shared client to connect.
	noRun := func(context.Context, agent.Config, func()) error { return nil }
	c := mustNew(t, Config{Base: base, Run: noRun}).NodeConfig(n)
	if c.NodeName != "hpc" || c.Provider != "kube" || c.ProviderConfig != "/file.json" || !c.DisableTaint || c.KubeletPort != 10260 {
		t.Errorf("file's fields not taken: %+v", c)
	}
	if c.CertDir != filepath.Join("/var/lib/vkubelet", "hpc") || c.MetricsAddr != "" || c.HealthzAddr != "" || c.KubeAPIQPS != 50 {
		t.Errorf("per-node settings: cert dir %q, metrics %q, healthz %q, qps %v", c.CertDir, c.MetricsAddr, c.HealthzAddr, c.KubeAPIQPS)
	}
	if c.Kubeconfig != "" {
		t.Errorf("kubeconfig %q without a bootstrap credential", c.Kubeconfig)
	}

	explicit := map[string]bool{FlagProvider: true, FlagProviderConfig: true, FlagDisableTaint: true}
	withBootstrap := base
	withBootstrap.BootstrapKubeconfig = "/bootstrap"
	c = mustNew(t, Config{Base: withBootstrap, Explicit: explicit}).NodeConfig(nodeconfig.Node{Name: "m-1", Provider: "kube", ProviderConfig: "/file.json", DisableProviderTaint: ptr.To(true)})
	if c.Provider != "mock" || c.ProviderConfig != "/flag.json" || c.DisableTaint {
		t.Errorf("flags given on the command line did not win: %+v", c)
	}
	if c.KubeletPort != 0 {
		t.Errorf("kubelet port %d: nodes of one process cannot share --kubelet-port", c.KubeletPort)
	}
	if c.Kubeconfig != filepath.Join("/var/lib/vkubelet", "m-1", "kubeconfig") {
		t.Errorf("each bootstrapped node keeps its own kubeconfig; got %q", c.Kubeconfig)
	}
}

func mustNew(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
