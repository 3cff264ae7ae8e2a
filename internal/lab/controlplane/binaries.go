package controlplane

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Versions of the components vkubelet builds. They must match buildmod/*/go.mod.txt.
// KubernetesVersion is the control plane every test and benchmark runs by default
// (buildmod/kubernetes); the other releases that can be built are in versions.go.
const (
	KubernetesVersion    = "v1.37.1"
	EtcdVersion          = "v3.7.3"
	MetricsServerVersion = "v0.9.0"
	KwokVersion          = "v0.8.0"
	HelmVersion          = "v4.3.1"
	CoreDNSVersion       = "v1.15.0"
)

// buildmod holds one small Go module per component family, stored as .txt so that
// they stay out of the project's own module (a go.mod below us would make a nested
// module, which go:embed refuses). They are written to the cache and built there.
//
//go:embed buildmod
var buildmod embed.FS

// Binaries are the paths of the control-plane executables.
type Binaries struct {
	// Version is the Kubernetes release they are, v1.<minor>.<patch>.
	Version           string
	Etcd              string
	APIServer         string
	Scheduler         string
	ControllerManager string
	Kubectl           string
	// KubeProxy is kube-proxy, of the same Kubernetes version, for the Service
	// networking of pods that a CRI provider runs on this machine.
	KubeProxy string
}

// component is one family of binaries built from one build module.
type component struct {
	name    string // names its cache entries
	version string // pinned version, part of the cache key
	// module is its directory in buildmod/; empty: name.
	module   string
	packages []string // Go packages to build, one binary each
	ldflags  string
	// after, if set, runs in the directory of the freshly built binaries before
	// they are installed, to derive files from them.
	after func(ctx context.Context, dir string) error
}

// etcd serves every Kubernetes release's API server; EnsureBinaries builds it.
var etcd = component{
	name:     "etcd",
	version:  EtcdVersion,
	packages: []string{"go.etcd.io/etcd/server/v3"},
	ldflags:  "-s -w",
}

// metricsServer serves metrics.k8s.io (kubectl top) for `vkubeletctl up`; only
// EnsureMetricsServer builds it, so control planes without it never wait for it.
var metricsServer = component{
	name:     "metrics-server",
	version:  MetricsServerVersion,
	packages: []string{"sigs.k8s.io/metrics-server/cmd/metrics-server"},
	// Where metrics-server's own release build puts its version.
	ldflags: "-s -w -X k8s.io/client-go/pkg/version.gitVersion=" + MetricsServerVersion,
}

// kwok is the node simulator that `vkubeletctl bench --compare kwok` measures next to
// vkubelet; only EnsureKwok builds it. Besides kwok, the build module has a small
// command of ours that prints the stages kwokctl gives kwok by default (kwok alone
// has none and refuses to start without them); they are written once, next to
// the binary, as kwokStages.
var kwok = component{
	name:     "kwok",
	version:  KwokVersion,
	packages: []string{"sigs.k8s.io/kwok/cmd/kwok", "vkubelet.local/kwok-default-stages"},
	// kwok's module states its own version (pkg/consts), so no -X is needed.
	ldflags: "-s -w",
	after: func(ctx context.Context, dir string) error {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, "kwok-default-stages")).Output()
		if err != nil {
			return fmt.Errorf("printing kwok's default stages: %w", err)
		}
		return os.WriteFile(filepath.Join(dir, kwokStages), out, 0o644)
	},
}

// helm installs the chart (charts/vkubelet) in its tests; only EnsureHelm builds it.
var helm = component{
	name:     "helm",
	version:  HelmVersion,
	packages: []string{"helm.sh/helm/v4/cmd/helm"},
	// Where Helm's own release build puts its version (`helm version`).
	ldflags: "-s -w -X helm.sh/helm/v4/internal/version.version=" + HelmVersion,
}

// coreDNS is the cluster DNS for pods that a CRI provider runs on this machine;
// only EnsureCoreDNS builds it. The build module's main links only the plugins
// such a DNS needs (see buildmod/coredns/main.go.txt), not CoreDNS's full set.
var coreDNS = component{
	name:     "coredns",
	version:  CoreDNSVersion,
	packages: []string{"vkubelet.local/coredns"},
	// Where CoreDNS's own release build puts `git describe`, which at the tag is
	// the version (`coredns -version`).
	ldflags: "-s -w -X github.com/coredns/coredns/coremain.GitCommit=" + CoreDNSVersion,
}

// moduleDir is c's build module in the embedded buildmod.
func (c component) moduleDir() string {
	if c.module != "" {
		return "buildmod/" + c.module
	}
	return "buildmod/" + c.name
}

// kwokStages is the file, beside the kwok binary, holding its default stages.
const kwokStages = "default-stages.yaml"

// CacheDir is where built binaries live: $VKUBELET_CACHE, else
// $XDG_CACHE_HOME/vkubelet, else ~/.cache/vkubelet.
func CacheDir() (string, error) {
	if d := os.Getenv("VKUBELET_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "vkubelet"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "vkubelet"), nil
}

// EnsureBinaries returns the control-plane binaries, building the ones missing from
// the cache first. Progress and the reuse of cached binaries are reported to out
// (nil for silence). Concurrent callers, in this process or others, build once: the
// others wait on a lock file.
//
// The Kubernetes release is SelectedKubernetesVersion's; EnsureKubernetes takes
// another.
func EnsureBinaries(ctx context.Context, out io.Writer) (*Binaries, error) {
	return EnsureKubernetes(ctx, SelectedKubernetesVersion(), out)
}

// EnsureKubernetes is EnsureBinaries for a given Kubernetes release, one of
// KubernetesVersions.
func EnsureKubernetes(ctx context.Context, version string, out io.Writer) (*Binaries, error) {
	kube, err := kubernetesRelease(version)
	if err != nil {
		return nil, err
	}
	k, err := ensureCached(ctx, kube, out)
	if err != nil {
		return nil, err
	}
	e, err := ensureCached(ctx, etcd, out)
	if err != nil {
		return nil, err
	}
	return &Binaries{
		Version:           version,
		Etcd:              filepath.Join(e, "server"),
		APIServer:         filepath.Join(k, "kube-apiserver"),
		Scheduler:         filepath.Join(k, "kube-scheduler"),
		ControllerManager: filepath.Join(k, "kube-controller-manager"),
		Kubectl:           filepath.Join(k, "kubectl"),
		KubeProxy:         filepath.Join(k, "kube-proxy"),
	}, nil
}

// EnsureMetricsServer returns the path of the metrics-server binary, building it
// first if the cache lacks it, with the progress reporting and locking of
// EnsureBinaries.
func EnsureMetricsServer(ctx context.Context, out io.Writer) (string, error) {
	dir, err := ensureCached(ctx, metricsServer, out)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "metrics-server"), nil
}

// ensureCached returns the cache directory of c's binaries, building them first if
// the cache lacks them.
func ensureCached(ctx context.Context, c component, out io.Writer) (string, error) {
	if out == nil {
		out = io.Discard
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return c.ensure(ctx, cache, out)
}

// Kwok is a built kwok.
type Kwok struct {
	Binary string
	// Stages is a kwok configuration file (--config) with the stages kwokctl uses by
	// default: nodes Ready with a lease, pods Running at once, removed when deleted.
	Stages string
}

// EnsureKwok returns kwok, building it first if the cache lacks it, with the
// progress reporting and locking of EnsureBinaries.
func EnsureKwok(ctx context.Context, out io.Writer) (*Kwok, error) {
	dir, err := ensureCached(ctx, kwok, out)
	if err != nil {
		return nil, err
	}
	return &Kwok{Binary: filepath.Join(dir, "kwok"), Stages: filepath.Join(dir, kwokStages)}, nil
}

// EnsureHelm returns the path of the helm binary, building it first if the cache
// lacks it, with the progress reporting and locking of EnsureBinaries.
func EnsureHelm(ctx context.Context, out io.Writer) (string, error) {
	dir, err := ensureCached(ctx, helm, out)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm"), nil
}

// EnsureCoreDNS returns the path of the coredns binary, building it first if the
// cache lacks it, with the progress reporting and locking of EnsureBinaries.
func EnsureCoreDNS(ctx context.Context, out io.Writer) (string, error) {
	dir, err := ensureCached(ctx, coreDNS, out)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "coredns"), nil
}

// key names the cache entry: the version plus a hash of the build module, so that a
// change to the pinned dependencies never reuses binaries built from the old ones.
func (c component) key() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(buildmod, c.moduleDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := buildmod.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading build module %s: %w", c.moduleDir(), err)
	}
	io.WriteString(h, c.ldflags+strings.Join(c.packages, ","))
	return fmt.Sprintf("%s-%s-%s", c.name, c.version, hex.EncodeToString(h.Sum(nil))[:12]), nil
}

func (c component) ensure(ctx context.Context, cache string, out io.Writer) (string, error) {
	key, err := c.key()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(cache, "bin", key)
	stamp := filepath.Join(binDir, ".complete")
	if _, err := os.Stat(stamp); err == nil {
		fmt.Fprintf(out, "controlplane: using cached %s %s binaries in %s\n", c.name, c.version, binDir)
		return binDir, nil
	}
	if err := os.MkdirAll(filepath.Join(cache, "bin"), 0o755); err != nil {
		return "", fmt.Errorf("creating cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, "bin", key+".lock"), out)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Someone else may have finished the build while we waited for the lock.
	if _, err := os.Stat(stamp); err == nil {
		fmt.Fprintf(out, "controlplane: using cached %s %s binaries in %s (built by another process)\n", c.name, c.version, binDir)
		return binDir, nil
	}
	if err := c.build(ctx, cache, key, binDir, out); err != nil {
		return "", err
	}
	return binDir, os.WriteFile(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

func (c component) build(ctx context.Context, cache, key, binDir string, out io.Writer) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s %s needs the Go toolchain on PATH: %w", c.name, c.version, err)
	}
	src := filepath.Join(cache, "src", key)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	entries, err := buildmod.ReadDir(c.moduleDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := buildmod.ReadFile(c.moduleDir() + "/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, strings.TrimSuffix(e.Name(), ".txt")), b, 0o644); err != nil {
			return err
		}
	}
	tmp := binDir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-ldflags", c.ldflags, "-o", tmp + "/"}, c.packages...)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	// GOFLAGS from the caller (say -mod=vendor) must not leak into our module, and a
	// go.work around the cache must not capture it.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	logPath := filepath.Join(cache, "bin", key+".build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile

	fmt.Fprintf(out, "controlplane: building %s %s (%s) from the Go module proxy; this takes several minutes the first time (log: %s)\n",
		c.name, c.version, strings.Join(c.packages, ", "), logPath)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting go build for %s: %w", c.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("building %s %s failed after %s: %w\n%s", c.name, c.version,
					time.Since(start).Round(time.Second), err, tailFile(logPath, 30))
			}
			if c.after != nil {
				if err := c.after(ctx, tmp); err != nil {
					return fmt.Errorf("%s %s: %w", c.name, c.version, err)
				}
			}
			if err := os.RemoveAll(binDir); err != nil {
				return err
			}
			if err := os.Rename(tmp, binDir); err != nil {
				return fmt.Errorf("installing %s binaries: %w", c.name, err)
			}
			fmt.Fprintf(out, "controlplane: built %s %s in %s\n", c.name, c.version, time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			fmt.Fprintf(out, "controlplane: still building %s %s (%s elapsed)\n", c.name, c.version, time.Since(start).Round(time.Second))
		}
	}
}

// lockFile takes an exclusive flock on path, reporting when it has to wait.
func lockFile(ctx context.Context, path string, out io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !waiting {
			fmt.Fprintf(out, "controlplane: another process is building the binaries; waiting for %s\n", path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// tailFile returns the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
