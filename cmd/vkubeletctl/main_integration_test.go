package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// vkubeletctl is the command built for these tests, with the vkubelet command
// next to it, where `vkubeletctl bench` looks for the node agent by default.
var vkubeletctl string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vkubeletctl-bin-")
	if err != nil {
		panic(err)
	}
	// Both in one build, with the flags of `make build`, so that the two share
	// one compilation with it.
	build := exec.Command("go", "build", "-trimpath", "-o", dir+string(os.PathSeparator), "../vkubelet", ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building vkubelet and vkubeletctl: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	vkubeletctl = filepath.Join(dir, "vkubeletctl")
	testenv.Main(m, controlplane.Config{})
}
