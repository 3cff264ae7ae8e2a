package upstream_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// runNode starts run, a node's process (a program built with upstreammock)
// running the Node node, its output kept, until the test ends: then it is
// stopped with SIGTERM (killed after 30 s) and must have stopped cleanly,
// without a data race reported; its output is logged if the test failed, and
// the Node is deleted. what names the program in messages.
func runNode(t *testing.T, what string, run *exec.Cmd, node string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	c := testenv.Client(t)
	t.Cleanup(func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			_ = run.Process.Kill()
			err = <-exited
		}
		if strings.Contains(out.String(), "WARNING: DATA RACE") {
			t.Errorf("a data race in %s:\n%s", what, out.String())
		} else if err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM (%v):\n%s", what, err, out.String())
		} else if t.Failed() {
			t.Logf("%s:\n%s", what, out.String())
		}
		_ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return out
}
