package cri

import "testing"

// A sysctl named with slashes reaches the runtime with dots, as the kubelet
// hands it over.
func TestSysctlNamesAreDotted(t *testing.T) {
	for in, want := range map[string]string{
		"kernel.shm_rmid_forced":           "kernel.shm_rmid_forced",
		"kernel/shm_rmid_forced":           "kernel.shm_rmid_forced",
		"net/ipv4/conf/eno2.100/rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"net.ipv4.conf.eno2/100.rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
	} {
		if got := dottedSysctl(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
