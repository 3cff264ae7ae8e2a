package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func writeNodeSet(t *testing.T, path string, names ...string) {
	t.Helper()
	doc := "apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n"
	for _, n := range names {
		doc += "  - name: " + n + "\n"
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// `vkubelet run --config` runs the nodes of a NodeSet file in one process and
// follows the file on SIGHUP: an added node registers, a removed one stops
// renewing its lease, the others go on; a broken file is not applied and the
// nodes stay. /readyz answers for all of them.
func TestRunConfigFollowsTheFileOnSIGHUP(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "nodes.yaml")
	writeNodeSet(t, file, "hup-a", "hup-b")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthz := ln.Addr().String()
	ln.Close()
	p := startNodeProcess(t, "run", "--config", file, "--kubeconfig", cp.KubeconfigPath,
		"--self-signed-serving-cert", "--node-lease-duration=10s", "--node-lease-renew-interval=2s",
		"--cert-dir", t.TempDir(), "--healthz-addr", healthz)
	t.Cleanup(func() {
		for _, n := range []string{"hup-a", "hup-b", "hup-c"} {
			_ = c.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	testenv.WaitNodeReady(t, c, "hup-a", 60*time.Second)
	testenv.WaitNodeReady(t, c, "hup-b", 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + healthz + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("/readyz: %d %s", resp.StatusCode, b)
	})

	renewTime := func(node string) time.Time {
		l, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.RenewTime.Time
	}
	// renewedTwice waits for node's lease to be renewed twice from now: on any
	// machine, time enough for a stopped node's renewal to have shown.
	renewedTwice := func(node string) {
		t.Helper()
		last, seen := renewTime(node), 0
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			if now := renewTime(node); now.After(last) {
				last, seen = now, seen+1
			}
			return seen >= 2, fmt.Sprintf("%s's lease renewed %d times since the change, want 2", node, seen)
		})
	}
	writeNodeSet(t, file, "hup-a", "hup-c")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitNodeReady(t, c, "hup-c", 60*time.Second)
	// hup-b is stopped once hup-c runs (stops come first): its lease stays put
	// while hup-a's is renewed.
	stoppedAt := renewTime("hup-b")
	renewedTwice("hup-a")
	if !renewTime("hup-b").Equal(stoppedAt) {
		t.Error("the removed node hup-b still renews its lease")
	}

	// A broken file is not applied: the nodes stay as they are.
	if err := os.WriteFile(file, []byte("apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n  - name: hup-a\n    provder: mock\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), "configuration not applied") && strings.Contains(string(b), "line 5: field provder not found"),
			"the log does not say the broken file was not applied"
	})
	renewedTwice("hup-c") // after a broken file, hup-c goes on
}

// A file with an error starts nothing: the process says what and where, and ends.
func TestRunConfigWithABadFileStartsNothing(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	file := filepath.Join(t.TempDir(), "nodes.yaml")
	doc := "apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\nnodes:\n  - name: bad-file-ok\n  - name: bad-file-%d\n    count: 2\n    capacity: {cpu: lots}\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "run", "--config", file, "--kubeconfig", cp.KubeconfigPath, "--self-signed-serving-cert").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `line 5: capacity cpu: "lots"`) {
		t.Errorf("vkubelet run with a bad file: %v\n%s", err, out)
	}
	if _, err := c.CoreV1().Nodes().Get(context.Background(), "bad-file-ok", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a node of the bad file was registered: %v", err)
	}
}
