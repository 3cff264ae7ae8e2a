package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTheNodeBinaryLinksNoLabCode checks that the node's binary, the one in the
// container image, carries the node alone: none of the lab's packages
// (internal/lab/..., and the private containerd and Slurm of crienv and
// slurmenv), which are vkubeletctl's. It asks `go list -deps` for the packages
// the command links, built as the image builds it and as `go build` does here.
func TestTheNodeBinaryLinksNoLabCode(t *testing.T) {
	for _, cgo := range []string{"0", "1"} {
		list := exec.Command("go", "list", "-deps", ".")
		list.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
		out, err := list.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
			}
			t.Fatal(err)
		}
		pkgs := strings.Fields(string(out))
		if !slices.Contains(pkgs, "github.com/vkubelet/vkubelet/internal/process/agent") {
			t.Fatalf("CGO_ENABLED=%s: go list -deps printed no node agent, so it lists something else:\n%s", cgo, out)
		}
		for _, p := range pkgs {
			if strings.Contains(p, "/internal/lab/") || strings.HasSuffix(p, "/crienv") || strings.HasSuffix(p, "/slurmenv") {
				t.Errorf("CGO_ENABLED=%s: the node's binary links %s, lab code (vkubeletctl's)", cgo, p)
			}
		}
	}
}
