package e2econformance

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
	got := Compare(Column{Name: "kubelet", Reference: true, Results: kubelet}, Column{Name: "vkubelet CRI", Results: vkubelet})
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

func TestCompareMeasuresEachVirtualColumnAgainstTheKubelet(t *testing.T) {
	kubelet := []Result{{Name: "a", Outcome: Passed}, {Name: "b", Outcome: Passed}, {Name: "c", Outcome: Passed}, {Name: "d", Outcome: Failed}}
	cri := []Result{{Name: "a", Outcome: Passed}, {Name: "b", Outcome: Failed, Message: "no hook"}, {Name: "c", Outcome: Passed}}
	kube := []Result{{Name: "a", Outcome: Passed}, {Name: "b", Outcome: Failed, Message: "no affinity"}, {Name: "c", Outcome: Failed, Message: "no token"}, {Name: "d", Outcome: Passed}}
	got := Compare(Column{Name: "kubelet", Reference: true, Results: kubelet}, Column{Name: "vkubelet CRI", Results: cri}, Column{Name: "kube provider", Results: kube})
	for _, want := range []string{
		"| test | kubelet | vkubelet CRI | kube provider | explanation |\n| --- | --- | --- | --- | --- |\n",
		"| a | passed | passed | passed |  |\n",
		"| b | passed | failed | failed | vkubelet CRI: no hook; kube provider: no affinity |\n",
		"| c | passed | passed | failed | kube provider: no token |\n",
		// A test one run did not report is "not run" in its column.
		"| d | failed | not run | passed |  |\n",
		"vkubelet CRI passes 2 of the 3 tests the kubelet passes (66.7 %).\n\nkube provider passes 1 of the 3 tests the kubelet passes (33.3 %).\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("comparison lacks %q:\n%s", want, got)
		}
	}
}

func TestCompareWithoutTheKubeletHasNoMeasure(t *testing.T) {
	got := Compare(Column{Name: "vkubelet CRI", Results: []Result{{Name: "a", Outcome: Passed}}},
		Column{Name: "kube provider", Results: []Result{{Name: "a", Outcome: Failed, Message: "m"}}})
	if !strings.Contains(got, "| a | passed | failed | kube provider: m |\n") {
		t.Errorf("comparison lacks test a:\n%s", got)
	}
	if strings.Contains(got, "passes") {
		t.Errorf("a measure without a reference:\n%s", got)
	}
}

func TestCgroupMountsAreTheCgroupHierarchies(t *testing.T) {
	mounts := `tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
proc /proc proc rw 0 0
`
	got := cgroupMounts(mounts)
	var dirs []string
	for _, m := range got {
		dirs = append(dirs, m.dir)
	}
	if want := "/sys/fs/cgroup/unified /sys/fs/cgroup/cpuset /sys/fs/cgroup/cpu,cpuacct"; strings.Join(dirs, " ") != want {
		t.Errorf("got %q, want %q", dirs, want)
	}
	if len(got) == 3 && got[1].options[len(got[1].options)-1] != "cpuset" {
		t.Errorf("cpuset's options: %q", got[1].options)
	}
}

func TestTheTestsAStoppedRunDidNotReachAreNotRun(t *testing.T) {
	got := withNotRun([]Result{{Name: "a", Outcome: Passed}}, []string{"a", "b"})
	if len(got) != 2 || got[1].Name != "b" || got[1].Outcome != NotRun {
		t.Errorf("got %+v, want a passed and b not run", got)
	}
}

func TestEachKubeletHasItsOwnCgroupRootPortsAndPodLogs(t *testing.T) {
	got := kubeletConfig(kubeletJoin{Dir: "/run/x/target-kubelet", NodeIP: "10.213.0.2", Port: 10270, HealthzPort: 10278,
		ContainerdSocket: "/run/c.sock", ClusterDNS: "10.0.0.10"}, "/pki/ca.crt", "/vkubelet-conformance-abc")
	for _, want := range []string{
		"address: 10.213.0.2\nport: 10270\n",
		"healthzPort: 10278\n",
		`cgroupRoot: "/vkubelet-conformance-abc"` + "\n",
		`podLogsDir: "/run/x/target-kubelet/pod-logs"` + "\n",
		"clusterDNS: [10.0.0.10]\n",
		`containerRuntimeEndpoint: "unix:///run/c.sock"` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("configuration lacks %q:\n%s", want, got)
		}
	}
}
