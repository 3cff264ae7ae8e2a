package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// webScript serves busybox's page on port 8080 and runs until SIGTERM.
const webScript = `httpd -p 8080 -h /var/www; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`

func runningAndReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return p.Status.Phase == corev1.PodRunning && cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// What `kubectl debug` does, step by step through the API: an ephemeral container
// added to a running pod with the ephemeralcontainers subresource runs in the pod's
// network namespace (the pod's IP on its interface, the main container's port on
// localhost) and its target's process namespace, takes stdin through attach, ends
// terminated with its exit code and is not started again; its logs are served by
// name, and the pod stays Running and Ready throughout.
func TestEphemeralContainerThroughTheAPI(t *testing.T) {
	const node = "cri-e2e-debug"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, busybox("web", node, env.Busybox, webScript), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := testenv.WaitPod(t, ns, "web", "Running and Ready", runningAndReady)

	// The target's httpd is seen, not counted: it forks a child per request,
	// which on a busy machine has not always exited when ps runs after wget.
	testenv.RunEphemeralContainer(t, pod, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile, Stdin: true,
			Command: []string{"/bin/sh", "-c", `read line; echo "$line"; ip -4 addr show eth0 | grep -o 'inet [0-9.]*'; ` +
				`wget -qO- http://localhost:8080/index.html; echo "httpd: $(ps -o comm | grep -q httpd && echo seen)"; exit 3`},
		},
		TargetContainerName: "main",
	})

	// The debugger waits for a line on stdin: nothing it prints comes before the
	// attach. Stdin stays open until it has exited: the runtime detaches a
	// session whose stdin ends (for a container without stdinOnce, as kubectl
	// debug makes them).
	want := fmt.Sprintf("hello-debugger\ninet %s\nhello from busybox\nhttpd: seen\n", pod.Status.PodIP)
	stdin, typed := io.Pipe()
	go func() { _, _ = typed.Write([]byte("hello-debugger\n")) }()
	out, err := testenv.Attach(t, ns, "web", "debugger", stdin)
	typed.Close()
	if out != want {
		t.Errorf("attached to the debugger: %q (%v), want %q", out, err, want)
	}
	got := testenv.WaitPod(t, ns, "web", "the debugger terminated", func(p *corev1.Pod) bool {
		s := testenv.EphemeralContainerStatus(p, "debugger")
		return s != nil && s.State.Terminated != nil
	})
	if term := testenv.EphemeralContainerStatus(got, "debugger").State.Terminated; term.ExitCode != 3 || term.Reason != "Error" {
		t.Errorf("debugger terminated %+v, want exit code 3", term)
	}
	if !runningAndReady(got) {
		t.Errorf("pod after the debugger's end: %s", got.Status.Phase)
	}
	logs, err := c.CoreV1().Pods(ns).GetLogs("web", &corev1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
	if err != nil || string(logs) != want {
		t.Errorf("kubectl logs web -c debugger = %q, %v; want %q", logs, err, want)
	}

	t.Run("kubectl debug -it", func(t *testing.T) {
		kubectlDebug(t, c, ns, env.Busybox)
	})

	// Through all that, the first one stayed as it ended.
	got, err = c.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := testenv.EphemeralContainerStatus(got, "debugger"); s.State.Terminated == nil || s.RestartCount != 0 {
		t.Errorf("debugger at the end: %+v, want terminated, never restarted", s)
	}
}

// kubectlDebug runs `kubectl debug -it web --target=main` on a terminal, types a
// line and reads the ephemeral container's answer.
func kubectlDebug(t *testing.T, c kubernetes.Interface, ns, image string) {
	cp := testenv.ControlPlane(t)
	master, tty, err := openPTY()
	if err != nil {
		t.Fatalf("no pseudo-terminal for kubectl -it: %v", err)
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cp.Binaries.Kubectl, "--kubeconfig", cp.KubeconfigPath, "-n", ns,
		"debug", "-it", "web", "--image="+image, "--target=main", "--container=kdebug", "--",
		"sh", "-c", `read line; echo "got:$line httpd:$(ps -o comm | grep -q httpd && echo seen)"`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // the terminal is kubectl's stdin, fd 0
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var out testenv.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, master) // ends with EIO once kubectl has exited
		close(copied)
	}()
	// kubectl says so once it is attached (and its terminal raw).
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		return strings.Contains(out.String(), "If you don't see a command prompt"), out.String()
	})
	if _, err := master.Write([]byte("typed-in\r")); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	<-copied
	t.Logf("kubectl debug -it printed:\n%s", out.String())
	if !strings.Contains(out.String(), "got:typed-in httpd:seen") {
		t.Errorf("kubectl debug -it printed %q (%v), want the container's answer", out.String(), waitErr)
	}
	if waitErr != nil {
		t.Errorf("kubectl debug -it: %v; it printed %q", waitErr, out.String())
	}
	p := testenv.WaitPod(t, ns, "web", "kdebug terminated", func(p *corev1.Pod) bool {
		s := testenv.EphemeralContainerStatus(p, "kdebug")
		return s != nil && s.State.Terminated != nil
	})
	if s := testenv.EphemeralContainerStatus(p, "kdebug"); s.State.Terminated.ExitCode != 0 {
		t.Errorf("kdebug: %+v", s)
	}
	for _, ec := range p.Spec.EphemeralContainers {
		if ec.Name == "kdebug" && (!ec.TTY || !ec.Stdin || ec.TargetContainerName != "main") {
			t.Errorf("kubectl debug -it --target=main made %+v", ec)
		}
	}
}

// openPTY opens a pseudo-terminal: its master end for the test, its terminal for
// kubectl -it, which refuses a stdin that is no terminal.
func openPTY() (master, tty *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0) // unlockpt
	}
	if err == nil {
		tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		master.Close()
		return nil, nil, errors.Join(errors.New("opening a pseudo-terminal"), err)
	}
	return master, tty, nil
}
