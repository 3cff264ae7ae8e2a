package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
)

// debianPython is the interpreter Debian's python3-grpcio belongs to (a python3
// earlier on PATH, pyenv's say, lacks it).
const debianPython = "/usr/bin/python3"

// The provider protocol is language-neutral: the Python example provider
// (examples/python-provider, JSON objects, no notifications) runs a node's pods,
// driven with kubectl: run, wait for Ready, logs, exec, delete.
func TestAProviderWrittenInPythonRunsPodsThroughKubectl(t *testing.T) {
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	if out, err := exec.Command(debianPython, "-c", "import grpc, grpc_tools").CombinedOutput(); err != nil {
		testenv.Require(t, fmt.Errorf("%s lacks grpc (scripts/setup.sh --python installs python3-grpcio and python3-grpc-tools): %v\n%s", debianPython, err, out))
	}
	dir, err := os.MkdirTemp("", "vkpy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "py.sock")
	py := exec.Command(debianPython, "../../examples/python-provider/provider.py",
		"--proto", "api/v1alpha1/provider.proto", "--listen", "unix://"+sock)
	logFile, err := os.Create(filepath.Join(dir, "provider.log"))
	if err != nil {
		t.Fatal(err)
	}
	py.Stdout, py.Stderr = logFile, logFile
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = py.Process.Kill()
		_ = py.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("python provider:\n%s", b)
		}
	})

	const node = "python-node"
	cfgFile := filepath.Join(dir, "remote.json")
	b, _ := json.Marshal(map[string]any{"endpoint": "unix://" + sock, "pollInterval": "1s"})
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.LoadConfig(cfgFile); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.MockConfig(t, node, mock.Config{})
	cfg.Provider, cfg.ProviderConfig = "remote", cfgFile
	cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true
	nodetest.Run(t, cfg)
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	kubectl := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, cp.Binaries.Kubectl, append([]string{"--kubeconfig", cp.KubeconfigPath, "-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl("run", "snake", "--image=busybox", "--env=GREETING=hello from python",
		`--overrides={"spec":{"nodeName":"`+node+`"}}`, "--", "first line", "second line")
	kubectl("wait", "--for=condition=Ready", "pod/snake", "--timeout=60s")
	if out := kubectl("logs", "snake"); out != "first line\nsecond line\n" {
		t.Errorf("kubectl logs: %q", out)
	}
	if out := kubectl("exec", "snake", "--", "env"); !strings.Contains(out, "GREETING=hello from python") {
		t.Errorf("kubectl exec env: %q", out)
	}
	kubectl("delete", "pod", "snake", "--wait=true", "--timeout=60s")
}
