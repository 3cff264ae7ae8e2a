// Package previous builds the vkubelet that users run before they upgrade to
// this one, for the upgrade tests: until there is a release, it is a pinned
// commit of this repository's history, built from the clone's own history (a
// shallow clone fetches that one commit from its origin; one that cannot says
// so).
//
// The binary is built as `make build` builds (static, -trimpath), so the
// dependency graph compiled for this checkout serves it wherever the two
// versions' go.mod agree, and kept in the cache the control plane's binaries
// use, under the commit: it is built once per machine.
package previous

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// Commit is the previous version: the last commit before a deleted pod stayed in
// the API until its provider confirmed it stopped, the state users of the
// preceding round ran. Replace it with the last release's tag once there is one.
const Commit = "028291090b60992940a2e23bbfdffde13262ecab"

// Version is what the previous binary reports as its version (`vkubelet
// version`, the node's kubeletVersion), which tells the tests which of the two
// versions a node runs.
const Version = "previous-0282910"

// Build returns the path of the previous version's vkubelet binary, building it
// from the history of the checkout at repo the first time.
func Build(ctx context.Context, repo string) (string, error) {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "previous", Commit)
	bin := filepath.Join(dir, "vkubelet")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := extract(ctx, repo, src); err != nil {
		return "", err
	}
	const pkg = "github.com/vkubelet/vkubelet/internal/version."
	tmp := filepath.Join(src, "vkubelet.bin") // beside the cache entry: the rename stays on one file system
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-X "+pkg+"Version="+Version+" -X "+pkg+"Commit="+Commit, "-o", tmp, "./cmd/vkubelet")
	build.Dir = src
	// The caller's GOFLAGS (-race from a test run) must not reach this build,
	// nor a go.work around the cache capture it.
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the previous version (commit %s): %w\n%s", Commit, err, out)
	}
	// A rename is atomic: a concurrent build's caller sees a whole binary or
	// none, and the later rename replaces an identical one.
	return bin, os.Rename(tmp, bin)
}

// Chart returns the directory of the previous version's Helm chart
// (charts/vkubelet), taken from the history of the checkout at repo the first
// time.
func Chart(ctx context.Context, repo string) (string, error) {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "previous", Commit)
	chart := filepath.Join(dir, "chart", "vkubelet")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err == nil {
		return chart, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(dir, "chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := extract(ctx, repo, src, "charts/vkubelet"); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(chart), 0o755); err != nil {
		return "", err
	}
	// As for the binary, a rename shows a whole chart or none; it fails where a
	// concurrent caller's rename came first, which is as good.
	if err := os.Rename(filepath.Join(src, "charts", "vkubelet"), chart); err != nil {
		if _, statErr := os.Stat(filepath.Join(chart, "Chart.yaml")); statErr != nil {
			return "", err
		}
	}
	return chart, nil
}

// extract writes the files of Commit under paths (all if none) into dst, with
// git archive: no worktree to add and remove. Only a shallow clone is changed,
// by the fetch of that commit.
func extract(ctx context.Context, repo, dst string, paths ...string) error {
	if err := git(ctx, repo, nil, "cat-file", "-e", Commit+"^{commit}"); err != nil {
		// A shallow clone lacks it: one commit, fetched from where the clone
		// came from, is enough (where that can be reached).
		fetchCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if fetchErr := git(fetchCtx, repo, nil, "fetch", "--quiet", "--depth=1", "origin", Commit); fetchErr != nil {
			return fmt.Errorf("the previous version, commit %s, is not in the history of the clone at %s "+
				"(a shallow clone?), and fetching it from origin failed (%v): `git fetch --unshallow` brings it: %w",
				Commit, repo, fetchErr, err)
		}
	}
	var tarball bytes.Buffer
	if err := git(ctx, repo, &tarball, append([]string{"archive", "--format=tar", Commit}, paths...)...); err != nil {
		return err
	}
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking commit %s: %w\n%s", Commit, err, out)
	}
	return nil
}

// git runs git in repo, its output to out (nil: discarded).
func git(ctx context.Context, repo string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
