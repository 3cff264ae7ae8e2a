package cri

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

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

// A pod may set only the sysctls the kubelet deems safe, and not those of the
// node's own network or IPC namespace.
func TestOnlySafeSysctlsAreAllowed(t *testing.T) {
	p := &Provider{cfg: Config{Network: NetworkCNI}}
	cases := []struct {
		name    string
		sysctl  string
		hostNet bool
		hostIPC bool
		want    string // "" allowed
	}{
		{"safe", "kernel/shm_rmid_forced", false, false, ""},
		{"safe network", "net.ipv4.ip_local_port_range", false, false, ""},
		{"unsafe", "kernel.msgmax", false, false, `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{"network, host network", "net.ipv4.tcp_syncookies", true, false, "not allowed with host net enabled"},
		{"IPC, host IPC", "kernel.shm_rmid_forced", false, true, "not allowed with host ipc enabled"},
	}
	for _, c := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: c.hostNet, HostIPC: c.hostIPC,
			SecurityContext: &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: c.sysctl, Value: "1"}}}}}
		err := p.forbiddenSysctl(pod)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
