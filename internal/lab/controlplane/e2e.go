package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// E2E is what Kubernetes' own conformance tests need besides the control plane,
// all built from the control plane's Kubernetes version (KubernetesVersion), so
// that the tests, the kubelet they are compared with and the API server agree.
type E2E struct {
	// Test is e2e.test, Kubernetes' end-to-end suite (k8s.io/kubernetes/test/e2e
	// compiled with `go test -c`); it runs alone, ginkgo's flags prefixed with
	// --ginkgo. (--ginkgo.focus, --ginkgo.label-filter, --ginkgo.junit-report).
	Test string
	// Ginkgo runs Test's specs in parallel (ginkgo -p e2e.test -- <flags>).
	Ginkgo string
	// Kubelet is the real kubelet, the reference the virtual node is compared with.
	Kubelet string
	// Agnhost is the e2e tests' all-purpose test program, for their agnhost image.
	Agnhost string
	// Nonewprivs prints its effective user ID: the program of the nonewprivs
	// image, which runs it setuid root.
	Nonewprivs string
	// Pause does nothing until SIGTERM or SIGINT, reaping orphans meanwhile: the
	// tests' pause image (buildmod/e2e/main.go.txt).
	Pause string
}

// e2eTests is the E2E family: kubelet, agnhost, nonewprivs, pause and ginkgo by go build, and
// e2e.test by buildE2ETest once they are built (set in init, since the function
// needs the component's own cache key).
var e2eTests = component{
	name:    "e2e",
	version: KubernetesVersion,
	packages: []string{
		"k8s.io/kubernetes/cmd/kubelet",
		"k8s.io/kubernetes/test/images/agnhost",
		"k8s.io/kubernetes/test/images/nonewprivs",
		"vkubelet.local/pause",
		// Ginkgo's command, which runs e2e.test's specs in parallel processes
		// (e2e.test alone runs them one after the other). Its version is the
		// one k8s.io/kubernetes requires, which e2e.test is built with.
		"github.com/onsi/ginkgo/v2/ginkgo",
	},
	// The control plane's version stamp: e2e.test prints it and compares it with
	// the API server's, and the kubelet reports it in its Node's nodeInfo.
	ldflags: defaultKubernetes().ldflags,
}

func init() { e2eTests.after = buildE2ETest }

// e2eTestBinary is the file name of the compiled suite.
const e2eTestBinary = "e2e.test"

// EnsureE2E returns the conformance binaries, building them first if the cache
// lacks them (e2e.test alone takes many minutes the first time), with the
// progress reporting and locking of EnsureBinaries.
func EnsureE2E(ctx context.Context, out io.Writer) (*E2E, error) {
	dir, err := ensureCached(ctx, e2eTests, out)
	if err != nil {
		return nil, err
	}
	return &E2E{
		Test:       filepath.Join(dir, e2eTestBinary),
		Ginkgo:     filepath.Join(dir, "ginkgo"),
		Kubelet:    filepath.Join(dir, "kubelet"),
		Agnhost:    filepath.Join(dir, "agnhost"),
		Nonewprivs: filepath.Join(dir, "nonewprivs"),
		Pause:      filepath.Join(dir, "pause"),
	}, nil
}

// buildE2ETest compiles k8s.io/kubernetes/test/e2e into dir with `go test -c`,
// which `go build` cannot do (the suite is the package's test binary). It runs
// as the component's after step, in the build module that component.build has
// just written to <cache>/src/<key>, with that build's environment.
func buildE2ETest(ctx context.Context, dir string) error {
	cache, err := CacheDir()
	if err != nil {
		return err
	}
	key, err := e2eTests.key()
	if err != nil {
		return err
	}
	logPath := filepath.Join(cache, "bin", key+".e2e-test.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-ldflags", e2eTests.ldflags,
		"-o", filepath.Join(dir, e2eTestBinary), "k8s.io/kubernetes/test/e2e")
	cmd.Dir = filepath.Join(cache, "src", key)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go test -c k8s.io/kubernetes/test/e2e failed after %s: %w\n%s",
			time.Since(start).Round(time.Second), err, tailFile(logPath, 30))
	}
	fmt.Fprintf(logFile, "e2e.test built in %s\n", time.Since(start).Round(time.Second))
	return nil
}
