package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// KubernetesVersionEnv names the environment variable that picks the Kubernetes
// release of every control plane this process starts (the tests', `up`'s, the
// benchmark's) where the caller names none: how `make skew` runs the same tests
// against each release.
const KubernetesVersionEnv = "VKUBELET_KUBERNETES_VERSION"

// releaseModule is the build-module directory of a release other than the
// default: buildmod/kubernetes-v1.<minor>.<patch>, written by mkbuildmod.
var releaseModule = regexp.MustCompile(`^kubernetes-(v1\.(\d+)\.(\d+))$`)

// KubernetesVersions returns the Kubernetes releases whose control planes can be
// built here, oldest first: the default (KubernetesVersion) and one per build
// module that `go run ./internal/lab/controlplane/mkbuildmod` wrote.
func KubernetesVersions() []string {
	versions := []string{KubernetesVersion}
	entries, _ := fs.ReadDir(buildmod, "buildmod")
	for _, e := range entries {
		if m := releaseModule.FindStringSubmatch(e.Name()); m != nil && m[1] != KubernetesVersion {
			versions = append(versions, m[1])
		}
	}
	sort.Slice(versions, func(i, j int) bool { return releaseLess(versions[i], versions[j]) })
	return versions
}

// SelectedKubernetesVersion is the release a control plane runs when its caller
// names none: $VKUBELET_KUBERNETES_VERSION if set, else KubernetesVersion.
func SelectedKubernetesVersion() string {
	if v := os.Getenv(KubernetesVersionEnv); v != "" {
		return v
	}
	return KubernetesVersion
}

// MinorOf returns the minor version of a release v1.<minor>.<patch>, or an error
// naming the form expected.
func MinorOf(version string) (int, error) {
	parts := strings.Split(strings.TrimPrefix(version, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" {
		return 0, fmt.Errorf("%q is not a Kubernetes release such as %s", version, KubernetesVersion)
	}
	return strconv.Atoi(parts[1])
}

// kubernetesRelease is the component that builds a release's control plane, kubectl and
// kube-proxy.
func kubernetesRelease(version string) (component, error) {
	module := "kubernetes"
	if version != KubernetesVersion {
		module = "kubernetes-" + version
		if _, err := fs.Stat(buildmod, "buildmod/"+module); err != nil {
			return component{}, fmt.Errorf("Kubernetes %s cannot be built here; the releases that can are %s "+
				"(another is added by `go run ./internal/lab/controlplane/mkbuildmod -version %s`)",
				version, strings.Join(KubernetesVersions(), ", "), version)
		}
	}
	minor, err := MinorOf(version)
	if err != nil {
		return component{}, err
	}
	return component{
		name:    "kubernetes",
		module:  module,
		version: version,
		packages: []string{
			"k8s.io/kubernetes/cmd/kube-apiserver",
			"k8s.io/kubernetes/cmd/kube-scheduler",
			"k8s.io/kubernetes/cmd/kube-controller-manager",
			"k8s.io/kubernetes/cmd/kubectl",
			"k8s.io/kubernetes/cmd/kube-proxy",
		},
		// Without these the binaries report v0.0.0 on /version, which confuses
		// kubectl's version skew checks and our nodeInfo comparisons.
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=" + version +
			" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=" + strconv.Itoa(minor) +
			" -X k8s.io/component-base/version.gitTreeState=clean",
	}, nil
}

// defaultKubernetes is the default release's component, which the conformance
// build shares its version stamp with.
func defaultKubernetes() component {
	c, err := kubernetesRelease(KubernetesVersion)
	if err != nil {
		panic("controlplane: the default Kubernetes release has no build module: " + err.Error())
	}
	return c
}

// releaseLess orders releases v1.<minor>.<patch> by their numbers.
func releaseLess(a, b string) bool {
	va, errA := utilversion.ParseGeneric(a)
	vb, errB := utilversion.ParseGeneric(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return va.LessThan(vb)
}

// Built reports whether release version's control plane is in the cache as
// its build module now builds it, so that starting it builds nothing.
func Built(version string) (bool, error) {
	c, err := kubernetesRelease(version)
	if err != nil {
		return false, err
	}
	cache, err := CacheDir()
	if err != nil {
		return false, err
	}
	key, err := c.key()
	if err != nil {
		return false, err
	}
	_, err = os.Stat(filepath.Join(cache, "bin", key, ".complete"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
