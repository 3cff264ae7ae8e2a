// Command mkbuildmod writes the build module of one Kubernetes release into
// internal/lab/controlplane/buildmod/kubernetes-<version>: the go.mod and go.sum
// that build that release's control plane from the Go module proxy.
//
// k8s.io/kubernetes reaches its staging modules (k8s.io/api, k8s.io/client-go, ...)
// through replace directives to ./staging, which the go command ignores in a
// dependency; a module that builds it must name each staging module at its
// published version, v0.<minor>.<patch> for v1.<minor>.<patch>. Which staging
// modules a release has changes from release to release, so they are read from the
// release's own go.mod. The result is pinned by go mod tidy and committed, so a
// build is the same on every machine.
//
//	go run ./internal/lab/controlplane/mkbuildmod -version v1.34.4
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	version := flag.String("version", "", "the Kubernetes release, v1.<minor>.<patch>")
	out := flag.String("out", "internal/lab/controlplane/buildmod", "the build modules' directory")
	flag.Parse()
	if err := run(*version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkbuildmod:", err)
		os.Exit(1)
	}
}

var release = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

func run(version, out string) error {
	m := release.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("-version %q is not a Kubernetes release such as v1.34.4", version)
	}
	staging := "v0." + m[1] + "." + m[2]
	tmp, err := os.MkdirTemp("", "mkbuildmod-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	stagingModules, err := stagingOf(tmp, version)
	if err != nil {
		return err
	}
	tools, err := os.ReadFile(filepath.Join(out, "kubernetes", "tools.go.txt"))
	if err != nil {
		return err
	}
	var mod bytes.Buffer
	fmt.Fprintf(&mod, "module vkubelet.local/kubebuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", version)
	for _, s := range stagingModules {
		fmt.Fprintf(&mod, "\t%s => %s %s\n", s, s, staging)
	}
	mod.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), mod.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "tools.go"), tools, 0o644); err != nil {
		return err
	}
	if err := goCmd(tmp, "mod", "tidy"); err != nil {
		return err
	}
	dir := filepath.Join(out, "kubernetes-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"go.mod", "go.sum", "tools.go"} {
		b, err := os.ReadFile(filepath.Join(tmp, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".txt"), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Println(dir)
	return nil
}

// stagingOf returns the modules that release's go.mod replaces with its ./staging
// directories.
func stagingOf(dir, version string) ([]string, error) {
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n"), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, goEnv(), os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", version, err)
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, err
	}
	f, err := os.Open(info.GoMod)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mods []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "replace "))
		if len(fields) == 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "./staging/") {
			mods = append(mods, fields[0])
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes@%s's go.mod replaces no module with ./staging", version)
	}
	return mods, sc.Err()
}

func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, goEnv(), os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// goEnv keeps the caller's GOFLAGS and any go.work out of the throw-away module.
func goEnv() []string { return append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off") }
