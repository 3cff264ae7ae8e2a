package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// upProcess is a running `vkubeletctl up` and a client of its cluster.
type upProcess struct {
	cmd        *exec.Cmd
	dir        string
	kubeconfig string
	client     kubernetes.Interface
	stderr     *testenv.Buffer
	lines      chan string
}

// startUp runs `vkubeletctl up` as a user would and waits for its one line of output.
func startUp(t *testing.T, args ...string) *upProcess {
	t.Helper()
	testenv.ControlPlane(t) // the binaries are built; `up` starts its own cluster
	u := &upProcess{dir: filepath.Join(t.TempDir(), "up"), stderr: &testenv.Buffer{}, lines: make(chan string, 10)}
	u.cmd = exec.Command(vkubeletctl, append([]string{"up", "--dir", u.dir, "--kubelet-port", "0"}, args...)...)
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u.cmd.Stderr = u.stderr
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.cmd.Process.Kill(); _ = u.cmd.Wait() })
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			u.lines <- s.Text()
		}
		close(u.lines)
	}()
	var line string
	select {
	case line = <-u.lines:
	case <-time.After(3 * time.Minute):
		t.Fatalf("vkubeletctl up printed nothing; stderr:\n%s", u.stderr.String())
	}
	path, ok := strings.CutPrefix(line, "export KUBECONFIG=")
	if !ok {
		t.Fatalf("first line = %q, want export KUBECONFIG=<path>; stderr:\n%s", line, u.stderr.String())
	}
	u.kubeconfig = path
	restCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	u.client = kubernetes.NewForConfigOrDie(restCfg)
	for _, node := range upNodeNames(args) {
		testenv.WaitNodeReady(t, u.client, node, 60*time.Second)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		_, err := u.client.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return u
}

// upNodeNames are the nodes `vkubeletctl up args...` starts: vkubelet, or with
// --nodes N vkubelet-0 … vkubelet-<N-1>.
func upNodeNames(args []string) []string {
	for i, a := range args {
		if a == "--nodes" && i+1 < len(args) {
			if n, err := strconv.Atoi(args[i+1]); err == nil && n > 1 {
				names := make([]string, n)
				for j := range names {
					names[j] = fmt.Sprintf("vkubelet-%d", j)
				}
				return names
			}
		}
	}
	return []string{"vkubelet"}
}

// run creates what `kubectl run <name> --image=busybox -- <args>` creates (no node
// name, no toleration) and waits for it to be Running on the virtual node.
func (u *upProcess) run(t *testing.T, name string, args ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := u.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "busybox", Args: args}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		p, err := u.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "vkubelet", fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	})
}

// checkNodeIdentity checks that node joined as a kubelet does: its client
// certificate came from a kube-apiserver-client-kubelet CSR sent with a bootstrap
// token, and it asked for its serving certificate as system:node:<node>.
func (u *upProcess) checkNodeIdentity(t *testing.T, node string) {
	t.Helper()
	csrs, err := u.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bootstrapped, servingAsNode bool
	for _, csr := range csrs.Items {
		issued := len(csr.Status.Certificate) > 0
		switch csr.Spec.SignerName {
		case certificatesv1.KubeAPIServerClientKubeletSignerName:
			bootstrapped = bootstrapped || issued && strings.HasPrefix(csr.Spec.Username, "system:bootstrap:")
		case certificatesv1.KubeletServingSignerName:
			servingAsNode = servingAsNode || issued && csr.Spec.Username == "system:node:"+node
		}
	}
	if !bootstrapped || !servingAsNode {
		t.Errorf("node %s did not join under its own identity: client certificate by TLS bootstrap %v, serving CSR sent as system:node:%s %v",
			node, bootstrapped, node, servingAsNode)
	}
}

// checkBootstrapConfined checks that up's bootstrap token, the node's only
// credential before its identity, can obtain no other node's certificates.
func (u *upProcess) checkBootstrapConfined(t *testing.T) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(u.dir, "bootstrap.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckCannotBecomeAnotherNode(t, stolen, "victim-node", "10.9.9.9")
}

// stop sends SIGTERM and checks that nothing `up` started outlives it.
func (u *upProcess) stop(t *testing.T) {
	t.Helper()
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := u.cmd.Wait(); err != nil {
		t.Fatalf("vkubeletctl up exited with %v on SIGTERM; stderr:\n%s", err, u.stderr.String())
	}
	for l := range u.lines {
		t.Errorf("vkubeletctl up printed more than one line on stdout: %q", l)
	}
	out, _ := exec.Command("pgrep", "-f", u.dir).Output()
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Fatalf("processes of the stopped cluster remain: %s", s)
	}
}

// top waits until metrics.k8s.io has figures for the object at path, then
// runs `kubectl top <kind> <name>` and checks that it prints them.
func (u *upProcess) top(t *testing.T, path, kind, name string) {
	t.Helper()
	begin := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		b, err := u.client.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1", path).DoRaw(context.Background())
		return err == nil, fmt.Sprintf("GET %s: %v: %s", path, err, b)
	})
	out, err := exec.Command(testenv.ControlPlane(t).Binaries.Kubectl, "--kubeconfig", u.kubeconfig, "top", kind, name).CombinedOutput()
	// NAME  CPU(cores)  [CPU(%)]  MEMORY(bytes)  [MEMORY(%)]
	figures := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+\d+m\s+(\S+\s+)?\d+(Ki|Mi|Gi)\b`)
	if err != nil || !figures.Match(out) {
		t.Fatalf("kubectl top %s %s: %v:\n%s", kind, name, err, out)
	}
	t.Logf("kubectl top %s %s, %s after asking:\n%s", kind, name, time.Since(begin).Round(time.Second), out)
}

// TestUpPrintsKubeconfigAndRunsPods runs `vkubeletctl up` with the mock provider, and
// kubectl top shows the usage it reports through metrics-server.
func TestUpPrintsKubeconfigAndRunsPods(t *testing.T) {
	u := startUp(t)
	u.run(t, "hello")
	u.checkNodeIdentity(t, "vkubelet")
	u.checkBootstrapConfined(t)
	if err := netns.Available(); err != nil {
		t.Logf("not checking kubectl top: up runs metrics-server only with --netns (%v)", err)
	} else {
		u.top(t, "namespaces/default/pods/hello", "pod", "hello")
		u.top(t, "nodes/vkubelet", "node", "vkubelet")
	}
	u.stop(t)
}

// TestUpStartsAsManyNodesAsAsked runs `vkubeletctl up --nodes 3`: three nodes, each
// under its own identity and serving its own kubelet API, that the scheduler
// spreads pods over.
func TestUpStartsAsManyNodesAsAsked(t *testing.T) {
	u := startUp(t, "--nodes", "3")
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("spread-%d", i)
		if _, err := u.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Args: []string{"from-" + name}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	used := map[string]bool{}
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("spread-%d", i)
		testenv.Eventually(t, 90*time.Second, func() (bool, string) {
			p, err := u.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase == corev1.PodRunning {
				used[p.Spec.NodeName] = true
			}
			return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s: %s on %q", name, p.Status.Phase, p.Spec.NodeName)
		})
		// Its logs come from the kubelet API of the node it runs on.
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			b, err := u.client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return err == nil && strings.Contains(string(b), "from-"+name), fmt.Sprintf("logs of %s: %q, %v", name, b, err)
		})
	}
	if len(used) < 2 {
		t.Errorf("six pods ran on %v: the scheduler should spread them over the three nodes", used)
	}
	for _, node := range upNodeNames([]string{"--nodes", "3"}) {
		u.checkNodeIdentity(t, node)
	}
	u.stop(t)
}

// TestUpRunsRealContainersWithTheCRIProvider runs `vkubeletctl up --provider cri`: a
// busybox pod becomes a real container whose output kubectl logs shows and whose
// usage kubectl top shows; a client pod reaches a web pod through its Service's
// name (kube-proxy and CoreDNS, which up starts with --netns); with
// --cri-allow-privileged a privileged container runs.
func TestUpRunsRealContainersWithTheCRIProvider(t *testing.T) {
	testenv.ControlPlane(t) // skipped under -short
	testenv.Require(t, crienv.Available())
	u := startUp(t, "--provider", "cri", "--cri-allow-privileged")
	u.run(t, "real", "sh", "-c", "echo hello from a real container; sleep 3600")
	req := u.client.CoreV1().Pods("default").GetLogs("real", &corev1.PodLogOptions{})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		b, err := req.DoRaw(context.Background())
		return err == nil && string(b) == "hello from a real container\n", fmt.Sprintf("logs %q, %v", b, err)
	})
	privileged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "busybox", Args: []string{"sleep", "3600"},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}
	if _, err := u.client.CoreV1().Pods("default").Create(context.Background(), privileged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		p, err := u.client.CoreV1().Pods("default").Get(context.Background(), "privileged", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("privileged pod: %v %+v", err, p.Status)
	})
	if err := netns.Available(); err != nil {
		t.Logf("not checking Services, cluster DNS and kubectl top: up runs them only with --netns (%v)", err)
	} else {
		// The container's usage, from the runtime's stats through metrics-server.
		u.top(t, "namespaces/default/pods/real", "pod", "real")
		// A Service in front of a pod on the node, reached by name from another.
		ctx := context.Background()
		u.run(t, "web", "sh", "-c", "mkdir -p /www && echo hello from web > /www/index.html && exec httpd -f -p 8080 -h /www")
		if _, err := u.client.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"run": "web"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Each try is cut after 5 s: a connection made before kube-proxy has
		// written the Service's rules would otherwise wait out TCP's SYN
		// retries, two minutes.
		u.run(t, "client", "sh", "-c", "until timeout 5 wget -q -O- http://web/; do sleep 1; done; sleep 3600")
		// A try cut by timeout leaves busybox's "Terminated" before the answer.
		logs := u.client.CoreV1().Pods("default").GetLogs("client", &corev1.PodLogOptions{})
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			b, err := logs.DoRaw(ctx)
			return err == nil && (string(b) == "hello from web\n" || strings.HasSuffix(string(b), "\nhello from web\n")), fmt.Sprintf("client's logs %q, %v", b, err)
		})
	}
	m := regexp.MustCompile(`containerd at (\S+)/containerd\.sock`).FindStringSubmatch(u.stderr.String())
	if m == nil {
		t.Fatalf("up did not say where containerd runs:\n%s", u.stderr.String())
	}
	u.stop(t)
	// The containerd it started (and its shims) are gone too.
	out, _ := exec.Command("pgrep", "-f", m[1]).Output()
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Fatalf("containerd processes of the stopped up remain: %s", s)
	}
}
