package kubeletapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
)

const nodeName = "vk-api"

// node is the virtual node every test of this package talks to, started once.
var node struct {
	agent *agent.Node
	ip    string
	port  int32
}

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true})
}

// startNode runs the package's node (mock provider, kubelet API in a network
// namespace so the API server proxies nodes/<n>/proxy to it) the first time a test
// needs it; it lives until the test binary exits.
func startNode(t *testing.T) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	if node.agent != nil {
		return
	}
	// The API server proxies logs, exec and stats to a node address other than
	// loopback: the node gets one in a network namespace, which needs root.
	testenv.Require(t, netns.Available())
	link, err := netns.Create("vkapi")
	if err != nil {
		t.Fatalf("network namespace for the node: %v", err)
	}
	testenv.AtExit(link.Remove) // the link lives as long as the package's node
	ln, err := link.Listen(0)
	if err != nil {
		link.Remove()
		t.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "vkapi-")
	n, err := agent.New(context.Background(), agent.Config{
		NodeName: nodeName, Provider: "mock", RESTConfig: cp.RESTConfig, DisableTaint: true,
		InternalIP: link.NodeIP, KubeletListener: ln, StatusPollInterval: time.Second,
		StartupTimeout: 2 * time.Minute, ApproveServingCSR: true, CertDir: dir,
		ClientCAFile: cp.PKI.CACert, LeaseDuration: 40 * time.Second, RenewInterval: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		link.Remove()
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		if err := n.Run(context.Background(), func() { close(ready) }); err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("node not ready")
	}
	node.agent, node.ip, node.port = n, link.NodeIP, n.KubeletPort()
}

// runPod creates a Running pod on the node whose container args are its log lines.
func runPod(t *testing.T, ns, name string, args ...string) *corev1.Pod {
	t.Helper()
	startNode(t)
	c := testenv.Client(t)
	ctx := context.Background()
	_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{
			Name: "main", Image: "busybox", Args: args,
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err = c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, "pod not Running"
	})
	return p
}

// kubectl runs the control plane's kubectl with the admin kubeconfig.
func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	cmd := exec.Command(cp.Binaries.Kubectl, append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestKubectlLogs(t *testing.T) {
	ns := testenv.Namespace(t)
	p := runPod(t, ns, "logger", "first", "second", "third")

	if got := mustKubectl(t, "", "logs", "-n", ns, "logger"); got != "first\nsecond\nthird\n" {
		t.Fatalf("kubectl logs = %q", got)
	}
	if got := mustKubectl(t, "", "logs", "-n", ns, "logger", "--tail=1"); got != "third\n" {
		t.Fatalf("--tail=1 = %q", got)
	}
	got := mustKubectl(t, "", "logs", "-n", ns, "logger", "--timestamps")
	if !regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z (first|second|third)\n){3}$`).MatchString(got) {
		t.Fatalf("--timestamps = %q", got)
	}
	// Line i is written at start+i seconds; since the start time (whole seconds) + 1s
	// leaves the second and third lines.
	since := p.Status.StartTime.Add(time.Second).UTC().Format(time.RFC3339)
	if got := mustKubectl(t, "", "logs", "-n", ns, "logger", "--since-time="+since); got != "second\nthird\n" {
		t.Fatalf("--since-time=%s = %q", since, got)
	}
	if got := mustKubectl(t, "", "logs", "-n", ns, "logger", "--since=1h"); got != "first\nsecond\nthird\n" {
		t.Fatalf("--since=1h = %q", got)
	}

	// -f streams what there is and stays connected.
	cp := testenv.ControlPlane(t)
	cmd := exec.Command(cp.Binaries.Kubectl, "--kubeconfig", cp.KubeconfigPath, "logs", "-f", "-n", ns, "logger")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	for _, want := range []string{"first\n", "second\n", "third\n"} {
		line, err := r.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("logs -f: got %q (%v), want %q", line, err, want)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("kubectl logs -f ended by itself (%v); it must follow", err)
	case <-time.After(2 * time.Second):
	}
}

func TestKubectlExecAndAttach(t *testing.T) {
	ns := testenv.Namespace(t)
	runPod(t, ns, "shell", "sleep")

	if got := mustKubectl(t, "", "exec", "-n", ns, "shell", "--", "echo", "hi"); got != "echo hi\n" {
		t.Fatalf("exec = %q", got)
	}
	if got := mustKubectl(t, "some input\n", "exec", "-i", "-n", ns, "shell", "--", "cat"); got != "cat\nsome input\n" {
		t.Fatalf("exec -i = %q", got)
	}
	_, err := kubectl(t, "", "exec", "-n", ns, "shell", "--", "exit", "3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("exec of `exit 3`: %v, want kubectl to exit with status 3", err)
	}
	if got := mustKubectl(t, "attached input\n", "attach", "-i", "-n", ns, "shell", "-c", "main"); !strings.Contains(got, "attached input\n") {
		t.Fatalf("attach -i = %q", got)
	}

	// A TTY session, the way kubectl exec -it makes one: WebSocket to the API server.
	cp := testenv.ControlPlane(t)
	req := testenv.Client(t).CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name("shell").
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: "main", Command: []string{"cat"}, Stdin: true, Stdout: true, TTY: true,
	}, scheme.ParameterCodec)
	execer, err := remotecommand.NewWebSocketExecutor(cp.RESTConfig, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sizes := &fixedSize{remotecommand.TerminalSize{Width: 120, Height: 40}}
	err = execer.StreamWithContext(context.Background(), remotecommand.StreamOptions{
		Stdin: strings.NewReader("typed on a tty\n"), Stdout: &out, Tty: true, TerminalSizeQueue: sizes,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "cat\ntyped on a tty\n" {
		t.Fatalf("tty exec = %q", out.String())
	}
}

type fixedSize struct{ size remotecommand.TerminalSize }

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	if f.size.Width == 0 {
		return nil
	}
	s := f.size
	f.size = remotecommand.TerminalSize{}
	return &s
}

func TestKubectlPortForward(t *testing.T) {
	ns := testenv.Namespace(t)
	runPod(t, ns, "web")
	cp := testenv.ControlPlane(t)
	cmd := exec.Command(cp.Binaries.Kubectl, "--kubeconfig", cp.KubeconfigPath, "port-forward", "-n", ns, "pod/web", ":8080")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("port-forward said %q (%v): %s", line, err, stderr.String())
	}
	conn, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB each way
	go func() { _, _ = conn.Write(payload) }()
	got := make([]byte, len(payload))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("bytes came back changed")
	}
}

func TestStatsAndResourceMetricsThroughTheAPIServer(t *testing.T) {
	ns := testenv.Namespace(t)
	runPod(t, ns, "measured", "x")
	raw := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/stats/summary")
	var summary statsv1alpha1.Summary
	if err := json.Unmarshal([]byte(raw), &summary); err != nil {
		t.Fatalf("stats/summary is not a Summary: %v\n%s", err, raw)
	}
	if summary.Node.NodeName != nodeName || summary.Node.CPU == nil || summary.Node.Memory == nil {
		t.Fatalf("node stats incomplete: %+v", summary.Node)
	}
	found := false
	for _, ps := range summary.Pods {
		if ps.PodRef.Namespace == ns && ps.PodRef.Name == "measured" && len(ps.Containers) == 1 && ps.CPU != nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("stats/summary lacks pod %s/measured", ns)
	}

	text := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/metrics/resource")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("metrics/resource is not Prometheus text: %v", err)
	}
	for _, name := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes",
		"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "pod_cpu_usage_seconds_total"} {
		if families[name] == nil {
			t.Errorf("metrics/resource lacks %s", name)
		}
	}
	ours := false
	for _, m := range families["container_memory_working_set_bytes"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] == ns && labels["pod"] == "measured" && labels["container"] == "main" && m.GetGauge().GetValue() > 0 {
			ours = true
		}
	}
	if !ours {
		t.Error("container_memory_working_set_bytes lacks our container")
	}

	// The agent's own metrics, readiness and running pods, on the same port.
	agentMetrics := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/metrics")
	for _, want := range []string{"vkubelet_api_requests_total", "rest_client_requests_total", "go_goroutines"} {
		if !strings.Contains(agentMetrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if got := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/readyz"); got != "ok" {
		t.Errorf("/readyz = %q", got)
	}
	var running corev1.PodList
	if err := json.Unmarshal([]byte(mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/runningpods/")), &running); err != nil {
		t.Fatal(err)
	}
	found = false
	for _, p := range running.Items {
		found = found || p.Namespace == ns && p.Name == "measured" && p.UID != "" && len(p.Spec.Containers) == 1
	}
	if !found {
		t.Errorf("/runningpods/ lacks %s/measured: %+v", ns, running.Items)
	}
}

// directClient calls the kubelet port itself, trusting the cluster CA.
func directClient(t *testing.T) *http.Client {
	cp := testenv.ControlPlane(t)
	pem, err := os.ReadFile(cp.PKI.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func TestDirectAccessIsAuthenticatedAndAuthorized(t *testing.T) {
	ns := testenv.Namespace(t)
	runPod(t, ns, "target")
	c := testenv.Client(t)
	ctx := context.Background()
	base := fmt.Sprintf("https://%s/", net.JoinHostPort(node.ip, fmt.Sprint(node.port)))
	execURL := base + "exec/" + ns + "/target/main?command=id&output=1"

	// Plain HTTP is not served.
	resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "pods")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP answered 200: %s", body)
		}
	}

	// The serving certificate is the cluster's: verification against its CA works.
	hc := directClient(t)
	call := func(method, url, token string) int {
		req, _ := http.NewRequest(method, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call("POST", execURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("anonymous exec: %d, want 401", code)
	}
	if code := call("GET", base+"pods", "not-a-token"); code != http.StatusUnauthorized {
		t.Fatalf("bad token: %d, want 401", code)
	}

	token := func(sa string) string {
		if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	nobody := token("nobody")
	if code := call("POST", execURL, nobody); code != http.StatusForbidden {
		t.Fatalf("exec by a user without nodes/proxy: %d, want 403", code)
	}
	for _, path := range []string{"metrics", "runningpods/", "readyz", "debug/pprof/"} {
		if code := call("GET", base+path, ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET /%s: %d, want 401", path, code)
		}
		if code := call("GET", base+path, nobody); code != http.StatusForbidden {
			t.Errorf("GET /%s by a user without rights on the node: %d, want 403", path, code)
		}
	}

	operator := token("operator")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet-api-" + ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy", "nodes/stats"},
			Verbs: []string{"get", "create"}}},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "operator"}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	for _, path := range []string{"pods", "stats/summary", "healthz", "readyz", "runningpods/"} {
		if code := call("GET", base+path, operator); code != http.StatusOK {
			t.Fatalf("GET /%s by a permitted user: %d, want 200", path, code)
		}
	}
	// /metrics is nodes/metrics, which the operator was not given.
	if code := call("GET", base+"metrics", operator); code != http.StatusForbidden {
		t.Errorf("GET /metrics with nodes/proxy and nodes/stats but not nodes/metrics: %d, want 403", code)
	}
	// Exec without a streaming upgrade is refused by the protocol, not by authorization.
	if code := call("POST", execURL, operator); code == http.StatusForbidden || code == http.StatusUnauthorized {
		t.Fatalf("exec by a permitted user: %d", code)
	}
}

func TestServingCertificateComesFromACSR(t *testing.T) {
	startNode(t)
	c := testenv.Client(t)
	csrs, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issued := 0
	for _, csr := range csrs.Items {
		approved := false
		for _, cond := range csr.Status.Conditions {
			approved = approved || cond.Type == certificatesv1.CertificateApproved
		}
		if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && approved && len(csr.Status.Certificate) > 0 {
			issued++
		}
	}
	if issued == 0 {
		t.Fatal("no approved, issued kubelet-serving CSR")
	}
	// The TLS handshake verifies against the cluster CA for the node's IP.
	conn, err := tls.Dial("tcp", net.JoinHostPort(node.ip, fmt.Sprint(node.port)), directClient(t).Transport.(*http.Transport).TLSClientConfig)
	if err != nil {
		t.Fatalf("serving certificate does not verify against the cluster CA: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if leaf.Subject.CommonName != "system:node:"+nodeName {
		t.Fatalf("certificate subject %q", leaf.Subject.CommonName)
	}
	// And the API server, which checks kubelet certificates against that CA, gets through.
	if _, err := rest.HTTPClientFor(testenv.ControlPlane(t).RESTConfig); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/healthz")
}
