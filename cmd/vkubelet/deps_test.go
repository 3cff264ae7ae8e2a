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
// the command links, built as the image builds it and as `go build` does here;
// and the same of package sdk, whose programs are vkubelet with providers of
// their own. Neither links upstream virtual-kubelet's library, which only a
// program bringing an upstream provider (package upstream) needs.
func TestTheNodeBinaryLinksNoLabCode(t *testing.T) {
	for pkg, what := range map[string]string{".": "the node's binary", "github.com/vkubelet/vkubelet/sdk": "package sdk"} {
		for _, cgo := range []string{"0", "1"} {
			list := exec.Command("go", "list", "-deps", pkg)
			list.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
			out, err := list.Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
				}
				t.Fatal(err)
			}
			pkgs := strings.Fields(string(out))
			if !slices.Contains(pkgs, "github.com/vkubelet/vkubelet/internal/process/agent") {
				t.Fatalf("CGO_ENABLED=%s: go list -deps %s printed no node agent, so it lists something else:\n%s", cgo, pkg, out)
			}
			for _, p := range pkgs {
				if strings.Contains(p, "/internal/lab/") || strings.HasSuffix(p, "/crienv") || strings.HasSuffix(p, "/slurmenv") {
					t.Errorf("CGO_ENABLED=%s: %s links %s, lab code (vkubeletctl's)", cgo, what, p)
				}
				// The adapter of upstream virtual-kubelet's providers is a library
				// for programs that bring one; the node does not carry upstream.
				if p == "github.com/vkubelet/vkubelet/upstream" || strings.HasPrefix(p, "github.com/virtual-kubelet/virtual-kubelet") {
					t.Errorf("CGO_ENABLED=%s: %s links %s, upstream virtual-kubelet's adapter or library", cgo, what, p)
				}
			}
		}
	}
}
