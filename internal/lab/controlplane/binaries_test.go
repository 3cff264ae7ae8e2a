package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each build module requires the version its component claims, so that the cache
// key (version plus module hash) names what was built.
func TestBuildModulesPinTheirVersions(t *testing.T) {
	all := []component{etcd, metricsServer, kwok, helm, coreDNS, upstreamVirtualKubelet, interLinkAPI}
	for _, v := range KubernetesVersions() {
		c, err := kubernetesRelease(v)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, c)
	}
	for _, c := range all {
		mod, err := buildmod.ReadFile(c.moduleDir() + "/go.mod.txt")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(string(mod), " "+c.version+"\n") {
			t.Errorf("%s: %s/go.mod.txt does not require %s", c.name, c.moduleDir(), c.version)
		}
		if _, err := c.key(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestServiceAccountAdmissionStaysOnOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "ServiceAccount,TaintNodesByCondition"},
		{Config{ServiceAccountAdmission: true}, "TaintNodesByCondition"},
	} {
		if got := strings.Join(disabledAdmission(tc.cfg), ","); got != tc.want {
			t.Errorf("%+v: disabled plugins %s, want %s", tc.cfg, got, tc.want)
		}
	}
}

// Built says yes only for the cache entry the release's build module makes.
func TestBuiltLooksForTheReleasesOwnCacheEntry(t *testing.T) {
	t.Setenv("VKUBELET_CACHE", t.TempDir())
	c, err := kubernetesRelease(KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.key()
	if err != nil {
		t.Fatal(err)
	}
	cache, _ := CacheDir()
	stale := filepath.Join(cache, "bin", "kubernetes-"+KubernetesVersion+"-000000000000")
	for _, dir := range []string{stale, filepath.Join(cache, "bin", key)} {
		if built, err := Built(KubernetesVersion); err != nil || built {
			t.Fatalf("Built before %s has its stamp = %v, %v; want false", dir, built, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if built, err := Built(KubernetesVersion); err != nil || !built {
		t.Fatalf("Built = %v, %v; want true", built, err)
	}
	if _, err := Built("v1.29.0"); err == nil {
		t.Error("Built of a release without a build module: no error")
	}
}
