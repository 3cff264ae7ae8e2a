// Package testenv gives integration tests a real control plane: one per test package,
// started from TestMain, and a fresh namespace per test.
//
//	func TestMain(m *testing.M) { testenv.Main(m, controlplane.Config{Scheduler: true}) }
//
//	func TestSomething(t *testing.T) {
//		cp := testenv.ControlPlane(t)
//		ns := testenv.Namespace(t)
//		...
//	}
//
// With `go test -short` no control plane is started and the tests that ask for one
// are skipped; without -short the binaries are built if the cache lacks them, so CI
// always runs every integration test.
package testenv

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

var (
	shared    *controlplane.ControlPlane
	sharedCfg controlplane.Config
	atExit    []func()
)

// AtExit registers f to run after the package's tests, before the control plane
// stops: for resources shared by several tests.
func AtExit(f func()) { atExit = append(atExit, f) }

// Main starts one control plane with cfg, runs the package's tests and stops it.
func Main(m *testing.M, cfg controlplane.Config) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if cfg.Out == nil {
		cfg.Out = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	cp, err := controlplane.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: starting control plane: %v\n", err)
		os.Exit(1)
	}
	shared, sharedCfg = cp, cfg
	code := m.Run()
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping control plane: %v\n", err)
	}
	os.Exit(code)
}

// ControlPlane returns the package's control plane, or skips the test under -short.
func ControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs a control plane (run without -short)")
	}
	if shared == nil {
		t.Fatal("testenv: no control plane; call testenv.Main from TestMain")
	}
	return shared
}

// Client returns an admin clientset for the package's control plane.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(ControlPlane(t).RESTConfig)
	// Tests act as many users at once; client-go's default of 5 QPS would make
	// a test creating 200 pods take 40s.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace for this test, removed when the test ends. When the
// controller-manager runs, it waits for the namespace's `default` ServiceAccount,
// without which the apiserver refuses pods.
func Namespace(t testing.TB) string {
	t.Helper()
	c := Client(t)
	ctx := context.Background()
	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		err := c.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	if sharedCfg.ControllerManager {
		// Two minutes: after a test restarted the API server, the controller-
		// manager's watches come back with client-go's back-off, and its
		// ServiceAccount controller has missed the namespace until then (a CI run
		// waited more than 60 s).
		Eventually(t, 2*time.Minute, func() (bool, string) {
			_, err := c.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprintf("default ServiceAccount in %s: %v", ns.Name, err)
		})
	}
	return ns.Name
}

// Eventually polls cond every 100ms until it returns true, failing the test with the
// last description cond gave once timeout has passed (eventually.True).
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	eventually.True(t, timeout, cond)
}

// Exec runs cmd in a container of a pod through the API server, as `kubectl exec`
// does (the node's kubelet API serves it), with the package's admin credentials,
// and returns what it printed on stdout.
func Exec(t testing.TB, ns, pod, container string, cmd ...string) (string, error) {
	t.Helper()
	return ExecInteractive(t, ns, pod, container, nil, false, cmd...)
}

// ExecInteractive is Exec with stdin and, with tty, a terminal (`kubectl exec -it`).
func ExecInteractive(t testing.TB, ns, pod, container string, stdin io.Reader, tty bool, cmd ...string) (string, error) {
	t.Helper()
	cp := ControlPlane(t)
	c, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		return "", err
	}
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: stdin != nil, Stdout: true, TTY: tty}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cp.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tty})
	return out.String(), err
}

// Attach attaches to the main process of a container of a pod through the API
// server, as `kubectl attach -i` does (the node's kubelet API serves it), sends it
// stdin, and returns what it printed on stdout until it exited. The end of stdin
// ends the session too, unless the container has stdinOnce: keep it open for as
// long as the output matters.
func Attach(t testing.TB, ns, pod, container string, stdin io.Reader) (string, error) {
	t.Helper()
	cp := ControlPlane(t)
	c, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		return "", err
	}
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: stdin != nil, Stdout: true}, scheme.ParameterCodec)
	attach, err := remotecommand.NewSPDYExecutor(cp.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = attach.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out})
	return out.String(), err
}

// PortForward forwards a free local port on 127.0.0.1 to port of a pod through
// the API server, as `kubectl port-forward` does, and returns the local port and
// a function that ends the forwarding.
func PortForward(t testing.TB, ns, pod string, port int) (local int, stop func()) {
	t.Helper()
	cp := ControlPlane(t)
	c, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	tr, upgrader, err := spdy.RoundTripperFor(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	u := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-readyCh:
	case err := <-done:
		t.Fatalf("port-forward to %s/%s:%d: %v", ns, pod, port, err)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(stopCh); <-done }) }
	t.Cleanup(stop)
	return int(ports[0].Local), stop
}

// WaitPod waits up to 90 s for cond to hold of the pod, and returns the pod; what
// names the wait in the failure, with the pod's status.
func WaitPod(t testing.TB, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	c := Client(t)
	var pod *corev1.Pod
	Eventually(t, 90*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		b, _ := json.Marshal(p.Status)
		return cond(p), fmt.Sprintf("%s: %s", what, b)
	})
	return pod
}

// RunEphemeralContainer adds ec to pod (as last read) through the API's
// ephemeralcontainers subresource, as kubectl debug does, and waits until it runs.
func RunEphemeralContainer(t testing.TB, pod *corev1.Pod, ec corev1.EphemeralContainer) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, ec)
	if _, err := Client(t).CoreV1().Pods(pod.Namespace).UpdateEphemeralContainers(context.Background(), pod.Name, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitPod(t, pod.Namespace, pod.Name, ec.Name+" running", func(p *corev1.Pod) bool {
		s := EphemeralContainerStatus(p, ec.Name)
		return s != nil && s.State.Running != nil
	})
}

// EphemeralContainerStatus returns the status of p's ephemeral container name, or
// nil.
func EphemeralContainerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if p.Status.EphemeralContainerStatuses[i].Name == name {
			return &p.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

// WaitPhase waits up to a minute for the pod to reach phase.
func WaitPhase(t testing.TB, ns, name string, phase corev1.PodPhase) {
	t.Helper()
	c := Client(t)
	Eventually(t, time.Minute, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == phase, fmt.Sprintf("pod %s/%s: %s %s", ns, name, p.Status.Phase, p.Status.Message)
	})
}

// WaitNodeReady waits up to timeout for the node's Ready condition to be True.
func WaitNodeReady(t testing.TB, c kubernetes.Interface, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Sprintf("node %s Ready=%s: %s", name, cond.Status, cond.Message)
			}
		}
		return false, "node " + name + " has no Ready condition"
	})
}

// WaitNodeVersion waits for the node to report kubeletVersion, that is to be
// run by a binary that reports it (after an upgrade, a rollback), and to be
// Ready.
func WaitNodeVersion(t testing.TB, c kubernetes.Interface, node, kubeletVersion string) {
	t.Helper()
	Eventually(t, 2*time.Minute, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := n.Status.NodeInfo.KubeletVersion
		return got == kubeletVersion, fmt.Sprintf("node %s reports kubeletVersion %q, want %q", node, got, kubeletVersion)
	})
	WaitNodeReady(t, c, node, 2*time.Minute)
}

// DeleteAllPods asks for the deletion of every pod in ns, one request per pod,
// twenty at a time, as `kubectl delete pods --all` does. One DeleteCollection
// of a thousand pods can outlast the API server's request timeout on a busy
// machine (a 504, the deletion left half done).
func DeleteAllPods(t testing.TB, ns string) {
	t.Helper()
	c := Client(t)
	ctx := context.Background()
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for _, p := range l.Items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting pod %s/%s: %v", ns, p.Name, err)
			}
		}()
	}
	wg.Wait()
}
