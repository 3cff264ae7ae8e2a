// Package upstreammock builds programs that run upstream virtual-kubelet's own
// mock provider, its source unchanged, through vkubelet's adapter (package
// upstream): the proof, in the adapter's tests, that code written for upstream
// runs on vkubelet, and the provider `vkubeletctl bench --upstream` measures on
// both engines.
//
// The mock is an internal package of upstream's module
// (cmd/virtual-kubelet/internal/provider/mock), so it cannot be imported: each
// program is compiled in a scratch module (this repository's requirements, the
// checkout replacing vkubelet's module) with the mock's file copied from the
// module cache into the package upstreammock/mock.
package upstreammock

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Program is one of the programs Build builds.
type Program string

const (
	// Server serves the mock behind the adapter over vkubelet's provider
	// protocol on a unix socket (-kubeconfig, -node, -socket).
	Server Program = "server"
	// Node is a vkubelet of its own (package sdk) with the mock behind the
	// adapter compiled in: `--provider upstream-mock` runs a node on it, with
	// every flag of vkubelet's command.
	Node Program = "node"
)

//go:embed programs
var programs embed.FS

// mockFile is the mock provider's source in upstream's module.
const mockFile = "cmd/virtual-kubelet/internal/provider/mock/mock.go"

// Build compiles program against the vkubelet checkout at repo, with the race
// detector if race is set, in a directory of its own (under the system's
// temporary directory), and returns the binary's path; the caller removes
// filepath.Dir(bin) when done. It uses the module cache only (GOPROXY=off): the
// checkout's requirements are already there once it has been built.
func Build(ctx context.Context, repo string, program Program, race bool) (bin string, err error) {
	main, err := programs.ReadFile("programs/" + string(program) + "/main.go.txt")
	if err != nil {
		return "", fmt.Errorf("no program %q: %w", program, err)
	}
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/virtual-kubelet/virtual-kubelet")
	list.Dir = repo
	modDir, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("finding upstream virtual-kubelet in the module cache: %w", err)
	}
	mock, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(modDir)), mockFile))
	if err != nil {
		return "", err
	}
	goMod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return "", err
	}
	goSum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		return "", err
	}
	goMod = bytes.Replace(goMod, []byte("module github.com/vkubelet/vkubelet\n"), []byte("module upstreammock\n"), 1)
	goMod = append(goMod, []byte("\nrequire github.com/vkubelet/vkubelet v0.0.0-00010101000000-000000000000\n\nreplace github.com/vkubelet/vkubelet => "+repo+"\n")...)

	dir, err := os.MkdirTemp("", "upstreammock-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	files := map[string][]byte{"go.mod": goMod, "go.sum": goSum, "main.go": main, "mock/mock.go": mock}
	for name, b := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return "", err
		}
	}
	bin = filepath.Join(dir, "upstreammock-"+string(program))
	args := []string{"go", "build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, ".")
	// The build competes with the processes a test or a benchmark is running.
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "10"}, args...)
	}
	build := exec.CommandContext(ctx, args[0], args[1:]...)
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building upstream's mock with vkubelet's adapter (%s): %w\n%s", program, err, out)
	}
	return bin, nil
}

// Checkout returns the root of the vkubelet checkout that dir is in, for Build.
func Checkout(ctx context.Context, dir string) (string, error) {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}")
	list.Dir = dir
	list.Env = append(os.Environ(), "GOWORK=off")
	out, err := list.Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		return "", fmt.Errorf("%s is not in a vkubelet checkout (go list -m: %v)", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(b, []byte("module github.com/vkubelet/vkubelet\n")) {
		return "", fmt.Errorf("%s is not in a vkubelet checkout (the module at %s is another)", dir, root)
	}
	return root, nil
}
