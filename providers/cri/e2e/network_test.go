package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vkubelet/vkubelet/internal/lab/clusternet"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/providers/cri"
)

// startNetworkedNode starts a CRI node as `vkubeletctl up --provider cri` does: its
// containerd, pods, kube-proxy and CoreDNS in a network namespace of their own, its
// pods given the cluster DNS.
func startNetworkedNode(t *testing.T, name string) (*crienv.Env, *netns.Link, *clusternet.Network) {
	t.Helper()
	cp := testenv.ControlPlane(t) // skips under -short
	testenv.Require(t, netns.Available())
	ctx := context.Background()
	link, err := netns.Create("vkcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Remove)
	env, err := crienv.StartWith(ctx, crienv.Options{Netns: link})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	cfg := nodetest.CRIConfig(t, name, env, func(c *cri.Config) {
		c.ClusterDNS, c.ClusterDomain = []string{clusternet.DNSServiceIP}, clusternet.ClusterDomain
	})
	if cfg.KubeletListener, err = link.Listen(0); err != nil {
		t.Fatal(err)
	}
	cfg.InternalIP = link.NodeIP
	nodetest.Run(t, cfg)
	// kube-proxy starts once the node has registered with its address.
	cn, err := clusternet.Start(ctx, clusternet.Config{
		ControlPlane: cp, Link: link, NodeName: name, PodCIDR: env.PodCIDR, Out: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cn.Stop)
	return env, link, cn
}

// A web pod behind a Service and a client pod on the same CRI node: the client
// resolves the Service's names through the cluster DNS and fetches the page from
// its ClusterIP; an in-cluster client in it reaches the API server through the
// `kubernetes` Service (by its environment variables and by name) with the
// ServiceAccount's CA and token; the page is served on the node's NodePort and
// through `kubectl port-forward svc/web`.
func TestServicesAndClusterDNS(t *testing.T) {
	const node = "cri-net"
	env, link, _ := startNetworkedNode(t, node)
	c, ns := testenv.Client(t), testenv.Namespace(t)
	ctx := context.Background()

	web := busybox("web", node, env.Busybox,
		"mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www")
	web.Labels = map[string]string{"app": "web"}
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	client := busybox("client", node, env.Busybox, "exec sleep 3600")
	// An in-cluster client, built static here and mounted into the pod.
	bin := t.TempDir()
	// Static, with the flags of `make build`, whose compilation it shares.
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "incluster"), "./testdata/incluster")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/incluster: %v: %s", err, out)
	}
	client.Spec.Volumes = []corev1.Volume{{Name: "bin", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: bin}}}}
	client.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "bin", MountPath: "/opt/bin", ReadOnly: true}}
	for _, p := range []*corev1.Pod{web, client} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "client"} {
		testenv.WaitPhase(t, ns, name, corev1.PodRunning)
	}

	fqdn := fmt.Sprintf("web.%s.svc.cluster.local", ns)
	run := func(what string, cmd ...string) string {
		t.Helper()
		var out string
		testenv.Eventually(t, 60*time.Second, func() (bool, string) {
			var err error
			out, err = testenv.Exec(t, ns, "client", "main", cmd...)
			return err == nil, fmt.Sprintf("%s: %v: %s", what, err, out)
		})
		return out
	}
	resolv := run("resolv.conf", "cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver " + clusternet.DNSServiceIP, "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local", "ndots:5"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("/etc/resolv.conf lacks %q:\n%s", want, resolv)
		}
	}
	// (busybox's nslookup tries every search domain and exits 1 when any fails)
	for _, name := range []string{"web", fqdn} {
		if out := run("nslookup "+name, "sh", "-c", "nslookup "+name+"; true"); !strings.Contains(out, svc.Spec.ClusterIP) {
			t.Errorf("nslookup %s does not answer the ClusterIP %s:\n%s", name, svc.Spec.ClusterIP, out)
		}
	}
	// (this busybox's wget crashes on -T; timeout bounds it instead)
	for _, url := range []string{"http://web/", "http://" + fqdn + "/", "http://" + svc.Spec.ClusterIP + "/"} {
		if out := run("wget "+url, "timeout", "10", "wget", "-q", "-O-", url); strings.TrimSpace(out) != "hello-from-web" {
			t.Errorf("wget %s = %q", url, out)
		}
	}
	// In-cluster clients: the API server at $KUBERNETES_SERVICE_HOST:
	// $KUBERNETES_SERVICE_PORT as client-go's in-cluster configuration finds it,
	// and by the kubernetes Service's name through the pod's DNS (Go's resolver),
	// verified with the ServiceAccount's CA, authenticated with its token.
	for _, args := range [][]string{{}, {"kubernetes.default.svc"}} {
		version := run(fmt.Sprintf("incluster %v", args), append([]string{"/opt/bin/incluster"}, args...)...)
		if !strings.Contains(version, `"gitVersion"`) {
			t.Errorf("incluster %v = %q", args, version)
		}
	}

	// The NodePort, from this host to the node's address.
	nodePort := svc.Spec.Ports[0].NodePort
	url := fmt.Sprintf("http://%s/", net.JoinHostPort(link.NodeIP, fmt.Sprint(nodePort)))
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)) == "hello-from-web", fmt.Sprintf("GET %s: %s %q", url, resp.Status, b)
	})

	// kubectl port-forward svc/web: kubectl picks a pod behind the Service and
	// forwards to its target port through the node's kubelet API.
	cp := testenv.ControlPlane(t)
	pf := exec.Command(cp.Binaries.Kubectl, "--kubeconfig", cp.KubeconfigPath, "-n", ns, "port-forward", "svc/web", ":80")
	stdout, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	// "Forwarding from 127.0.0.1:PORT -> 8080"
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("kubectl port-forward svc/web: %v", err)
	}
	var local, target int
	if _, err := fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d -> %d", &local, &target); err != nil || target != 8080 {
		t.Fatalf("kubectl port-forward svc/web printed %q (%v), want a forward to the target port 8080", line, err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", local))
	if err != nil {
		t.Fatalf("through kubectl port-forward svc/web: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != "hello-from-web" {
		t.Errorf("through kubectl port-forward svc/web: %s %q", resp.Status, b)
	}
}

// testWriter sends progress to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
