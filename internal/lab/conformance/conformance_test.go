package conformance

import (
	"strings"
	"testing"
	"time"
)

func TestReadJUnitKeepsTheTestsThatRan(t *testing.T) {
	results, err := ReadJUnit("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Outcome{
		"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]":                                            Passed,
		"[sig-node] Pods should be updated [NodeConformance] [Conformance]":                                               Failed,
		"[sig-node] Pods should serve nginx [NodeConformance]":                                                            ImageUnavailableOutcome,
		"[sig-node] Sysctls [LinuxOnly] [NodeConformance] should support sysctls [MinimumKubeletVersion:1.21]":            Skipped,
		"[sig-node] Probing container should have monotonically increasing restart count [Conformance] [NodeConformance]": Interrupted,
	}
	got := map[string]Outcome{}
	for _, r := range results {
		got[r.Name] = r.Outcome
	}
	if len(got) != len(want) {
		t.Errorf("got %d results, want %d (the unselected test left out): %v", len(got), len(want), got)
	}
	for name, o := range want {
		if got[name] != o {
			t.Errorf("%s: got %q, want %q", name, got[name], o)
		}
	}
	for _, r := range results {
		if r.Outcome == Passed && r.Duration != 1500*time.Millisecond {
			t.Errorf("duration %s, want 1.5s", r.Duration)
		}
	}
}

func TestImageUnavailable(t *testing.T) {
	for ref, want := range map[string]bool{
		"127.0.0.1:5000/e2e-test-images/nginx:1.27.0-2":   true,
		"registry.k8s.io/e2e-test-images/nginx:1.28.0-2":  true,
		"127.0.0.1:5000/e2e-test-images/agnhost:2.66.1":   false,
		"127.0.0.1:5000/e2e-test-images/busybox:1.37.0-2": false,
		"127.0.0.1:5000/pause:3.10.2":                     false,
		"127.0.0.1:5000/e2e-test-images/volume/nfs:1.6.0": true,
		"example.com/some/image:1":                        false,
	} {
		if _, got := ImageUnavailable(ref); got != want {
			t.Errorf("ImageUnavailable(%s) = %v, want %v", ref, got, want)
		}
	}
}

func TestRepoListMovesEveryRegistryUnderTheLocalOne(t *testing.T) {
	got := RepoList("127.0.0.1:5000")
	for _, line := range []string{
		"promoterE2eRegistry: 127.0.0.1:5000/e2e-test-images\n",
		"gcRegistry: 127.0.0.1:5000\n",
		"dockerLibraryRegistry: 127.0.0.1:5000/library\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("repo list lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "invalidRegistry") {
		t.Errorf("the invalid registry must stay invalid:\n%s", got)
	}
}

func TestCompareCountsTheKubeletsPassesTheVirtualNodePasses(t *testing.T) {
	kubelet := []Result{{Name: "a", Outcome: Passed}, {Name: "b", Outcome: Passed}, {Name: "c", Outcome: Failed}}
	vkubelet := []Result{{Name: "a", Outcome: Passed}, {Name: "b", Outcome: Failed, Message: "x | y"}, {Name: "c", Outcome: Passed}}
	got := Compare(kubelet, vkubelet)
	for _, want := range []string{
		"| b | passed | failed | x \\| y |\n",
		"| c | failed | passed |  |\n",
		"vkubelet CRI passes 1 of the 2 tests the kubelet passes (50.0 %).",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("comparison lacks %q:\n%s", want, got)
		}
	}
}

func TestTheTestsAStoppedRunDidNotReachAreNotRun(t *testing.T) {
	got := withNotRun([]Result{{Name: "a", Outcome: Passed}}, []string{"a", "b"})
	if len(got) != 2 || got[1].Name != "b" || got[1].Outcome != NotRun {
		t.Errorf("got %+v, want a passed and b not run", got)
	}
}
