package crienv_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// Stop leaves no process of its containerd behind, the shims and what runs
// under them included, even when containerd could not remove its sandboxes
// first: here it is killed before Stop, so it answers nothing.
func TestStopLeavesNoShimBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts containerd")
	}
	testenv.Require(t, crienv.Available())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := crienv.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := e.Conn()
	if err != nil {
		e.Stop()
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "left", Namespace: "default", Uid: "uid-left"},
		LogDirectory: filepath.Join(e.Dir, "logs"),
	}})
	if err != nil {
		e.Stop()
		t.Fatal(err)
	}
	if len(processesOf(e.Socket)) == 0 {
		e.Stop()
		t.Fatalf("no shim serves sandbox %s: nothing to show", sb.PodSandboxId)
	}
	// containerd gone without a word: its shims are on their own.
	if pid := containerdPID(e.Socket); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	e.Stop()
	if left := processesOf(e.Socket); len(left) != 0 {
		t.Fatalf("after Stop, processes of its containerd still run: %v", left)
	}
}

// processesOf lists the command lines of the running processes that name the
// folder of socket (containerd, its shims).
func processesOf(socket string) []string {
	var found []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, filepath.Dir(socket)) }) {
			found = append(found, strings.Join(argv, " "))
		}
	}
	return found
}

// containerdPID is the pid of the containerd whose config or socket lives
// beside socket, 0 if none runs.
func containerdPID(socket string) int {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if filepath.Base(argv[0]) == "containerd" && strings.Contains(string(b), filepath.Dir(socket)) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			return pid
		}
	}
	return 0
}
