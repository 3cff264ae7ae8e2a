package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestKubeProxyIsBuiltWithTheControlPlane(t *testing.T) {
	testenv.ControlPlane(t) // TestMain has built or found the binaries already
	bins, err := controlplane.EnsureBinaries(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bins.KubeProxy, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), controlplane.KubernetesVersion) {
		t.Fatalf("kube-proxy --version = %q, %v; want %s", v, err, controlplane.KubernetesVersion)
	}
}

func TestCoreDNSHasOnlyTheClusterDNSPlugins(t *testing.T) {
	bin := coreDNS(t)
	out, err := exec.Command(bin, "-plugins").CombinedOutput()
	if err != nil {
		t.Fatalf("coredns -plugins: %v\n%s", err, out)
	}
	// The list also holds what these plugins import (prometheus, transfer...).
	got := strings.Fields(string(out))
	for _, p := range []string{
		"bind", "cache", "errors", "forward", "health", "hosts", "kubernetes",
		"loadbalance", "log", "loop", "ready", "reload",
	} {
		if !slices.Contains(got, p) {
			t.Errorf("coredns lacks the %s plugin; it has %v", p, got)
		}
	}
	// CoreDNS's full set, which we must not build, has these and their cloud SDKs.
	for _, p := range []string{"route53", "azure", "clouddns", "etcd"} {
		if slices.Contains(got, p) {
			t.Errorf("coredns has the %s plugin: built with CoreDNS's full plugin set", p)
		}
	}
	v, err := exec.Command(bin, "-version").CombinedOutput()
	if want := "CoreDNS-" + strings.TrimPrefix(controlplane.CoreDNSVersion, "v"); err != nil || !strings.Contains(string(v), want) {
		t.Fatalf("coredns -version = %q, %v; want %s", v, err, want)
	}
}

func TestCoreDNSAnswersFromHosts(t *testing.T) {
	bin := coreDNS(t)
	// The port is free when chosen but may be taken by a parallel test before
	// CoreDNS binds it (it binds UDP and TCP); a bind failure picks another.
	var addr string
	var ips []net.IP
	for attempt := 1; ; attempt++ {
		port := freeDNSPort(t)
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		exited, out := startCoreDNS(t, bin, port)
		resolver := &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "udp", addr)
			},
		}
		retry := false
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			select {
			case err := <-exited:
				if strings.Contains(out.String(), "address already in use") && attempt < 3 {
					retry = true
					return true, ""
				}
				t.Fatalf("coredns exited: %v\n%s", err, out.String())
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			ips, err = resolver.LookupIP(ctx, "ip4", "web.vkubelet.test")
			return err == nil, fmt.Sprintf("lookup on %s: %v", addr, err)
		})
		if !retry {
			break
		}
		t.Logf("port %d was taken before CoreDNS bound it; trying another", port)
	}
	if len(ips) != 1 || !ips[0].Equal(net.IPv4(192, 0, 2, 10)) {
		t.Fatalf("web.vkubelet.test = %v, want [192.0.2.10]", ips)
	}
}

// startCoreDNS runs CoreDNS on 127.0.0.1:port with a hosts entry for
// web.vkubelet.test; the channel reports its exit, the buffer its output.
func startCoreDNS(t *testing.T, bin string, port int) (chan error, *testenv.Buffer) {
	t.Helper()
	corefile := filepath.Join(t.TempDir(), "Corefile")
	err := os.WriteFile(corefile, fmt.Appendf(nil, `.:%d {
	bind 127.0.0.1
	errors
	log
	cache 30
	loadbalance
	loop
	hosts {
		192.0.2.10 web.vkubelet.test
	}
}
`, port), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	out := &testenv.Buffer{}
	cmd := exec.Command(bin, "-conf", corefile)
	cmd.Stdout, cmd.Stderr = out, out
	// CoreDNS dies with the test binary even if it is killed before its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return exited, out
}

// coreDNS returns the cached coredns, building it if needed, or skips under -short.
func coreDNS(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: builds CoreDNS (run without -short)")
	}
	bin, err := controlplane.EnsureCoreDNS(context.Background(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// freeDNSPort returns a port on 127.0.0.1 that was free for UDP and TCP a
// moment ago.
func freeDNSPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		// CoreDNS serves TCP on the same port: it must be free too.
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		c.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return 0
}
