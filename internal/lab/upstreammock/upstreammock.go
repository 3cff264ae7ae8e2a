// Package upstreammock builds programs that run providers written for upstream
// virtual-kubelet, their source unchanged, through vkubelet's adapter (package
// upstream): upstream's own mock provider, the proof in the adapter's tests that
// code written for upstream runs on vkubelet and the provider `vkubeletctl bench
// --upstream` measures on both engines; and interLink's virtual kubelet, a third
// party's provider, whose own main drives upstream's node package.
//
// Each program is compiled in a scratch module: this repository's requirements,
// the checkout replacing vkubelet's module, and the program's own requirement if
// it has one. Upstream's mock is an internal package of upstream's module
// (cmd/virtual-kubelet/internal/provider/mock), so it cannot be imported: its
// file is copied from the module cache into the package upstreammock/mock.
// interLink's provider is a package of interLink's module, which its program
// requires.
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

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// Program is one of the programs Build builds.
type Program string

const (
	// Server serves upstream's mock behind the adapter over vkubelet's
	// provider protocol on a unix socket (-kubeconfig, -node, -socket).
	Server Program = "server"
	// Node is a vkubelet of its own (package sdk) with upstream's mock behind
	// the adapter compiled in: `--provider upstream-mock` runs a node on it,
	// with every flag of vkubelet's command.
	Node Program = "node"
	// InterLink is a vkubelet of its own (package sdk) with interLink's virtual
	// kubelet (github.com/interlink-hq/interlink/pkg/virtualkubelet) behind the
	// adapter compiled in: `--provider interlink-vk` runs a node on it, its
	// --provider-config interLink's VirtualKubeletConfig.yaml; interLink's
	// provider reads the API with its own client, from $KUBECONFIG. It is built
	// without the race detector (see source.racy).
	InterLink Program = "interlink"
)

// source is what a program is built from besides its main and the checkout.
type source struct {
	// require is a module ("path version") the program imports that vkubelet
	// does not require; it comes through the Go module proxy the first time.
	require string
	// copies are files copied unchanged from the module cache.
	copies []copied
	// racy says the third party's code has data races of its own, which the
	// race detector would report (and exit on) whatever the adapter does: the
	// program is built without it. interLink's CreatePod adds to a pod's
	// container statuses while the goroutine it has just started submits the
	// same pod.
	racy bool
}

// copied is a file of a module, at the version the checkout requires, and where
// it goes in the scratch module.
type copied struct{ module, from, to string }

// upstreamMock is upstream's mock provider, as package upstreammock/mock.
var upstreamMock = copied{
	module: "github.com/virtual-kubelet/virtual-kubelet",
	from:   "cmd/virtual-kubelet/internal/provider/mock/mock.go",
	to:     "mock/mock.go",
}

var sources = map[Program]source{
	Server:    {copies: []copied{upstreamMock}},
	Node:      {copies: []copied{upstreamMock}},
	InterLink: {require: "github.com/interlink-hq/interlink " + controlplane.InterLinkVersion, racy: true},
}

//go:embed programs
var programs embed.FS

// Build compiles program against the vkubelet checkout at repo, with the race
// detector if race is set and the program's third-party code is free of races of
// its own, in a directory of its own (under the system's temporary directory),
// and returns the binary's path; the caller removes
// filepath.Dir(bin) when done. A program without a requirement of its own uses
// the module cache only (GOPROXY=off): the checkout's requirements are already
// there once it has been built.
func Build(ctx context.Context, repo string, program Program, race bool) (bin string, err error) {
	src, ok := sources[program]
	if !ok {
		return "", fmt.Errorf("no program %q", program)
	}
	main, err := programs.ReadFile("programs/" + string(program) + "/main.go.txt")
	if err != nil {
		return "", fmt.Errorf("program %q: %w", program, err)
	}
	files := map[string][]byte{"main.go": main}
	for _, c := range src.copies {
		list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", c.module)
		list.Dir = repo
		modDir, err := list.Output()
		if err != nil {
			return "", fmt.Errorf("finding %s in the module cache: %w", c.module, err)
		}
		if files[c.to], err = os.ReadFile(filepath.Join(strings.TrimSpace(string(modDir)), c.from)); err != nil {
			return "", err
		}
	}
	goMod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return "", err
	}
	if files["go.sum"], err = os.ReadFile(filepath.Join(repo, "go.sum")); err != nil {
		return "", err
	}
	goMod = bytes.Replace(goMod, []byte("module github.com/vkubelet/vkubelet\n"), []byte("module upstreammock\n"), 1)
	goMod = append(goMod, []byte("\nrequire github.com/vkubelet/vkubelet v0.0.0-00010101000000-000000000000\n\nreplace github.com/vkubelet/vkubelet => "+repo+"\n")...)
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if src.require != "" {
		goMod = append(goMod, []byte("\nrequire "+src.require+"\n")...)
	} else {
		env = append(env, "GOPROXY=off")
	}
	files["go.mod"] = goMod

	dir, err := os.MkdirTemp("", "upstreammock-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
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
	if race && !src.racy {
		// The flags of `go test -race`: the test binaries' compilation of
		// the dependency graph serves.
		args = append(args, "-race")
	} else {
		// The flags of `make build` and `make vet`: their compilation of the
		// dependency graph serves, where any other flags would compile all of
		// client-go and its kin again (minutes on a cold machine).
		args = append(args, "-trimpath")
		env = append(env, "CGO_ENABLED=0")
	}
	args = append(args, ".")
	// The build competes with the processes a test or a benchmark is running.
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "10"}, args...)
	}
	build := exec.CommandContext(ctx, args[0], args[1:]...)
	build.Dir = dir
	build.Env = env
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s with vkubelet's adapter: %w\n%s", program, err, out)
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
