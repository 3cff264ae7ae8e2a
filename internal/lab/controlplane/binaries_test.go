package controlplane

import (
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
