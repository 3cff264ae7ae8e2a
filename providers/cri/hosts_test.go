package cri

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodHostnameAndDomain(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" // cut at 63: "aaa…a-", whose "-" goes too
	cases := []struct {
		name, hostname, subdomain string
		wantHost, wantDomain      string
	}{
		{name: "web", wantHost: "web"},
		{name: "web", hostname: "www", wantHost: "www"},
		{name: "web", hostname: "www", subdomain: "front", wantHost: "www", wantDomain: "front.ns1.svc.cluster.local"},
		{name: long, wantHost: strings.Repeat("a", 62)},
	}
	for _, c := range cases {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "ns1"},
			Spec:       corev1.PodSpec{Hostname: c.hostname, Subdomain: c.subdomain},
		}
		host, domain := podHostname(pod, "cluster.local")
		if host != c.wantHost || domain != c.wantDomain {
			t.Errorf("podHostname(%s, %s, %s) = %q, %q; want %q, %q", c.name, c.hostname, c.subdomain, host, domain, c.wantHost, c.wantDomain)
		}
	}
}

func TestSandboxHostnameAsFQDN(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1"},
		Spec:       corev1.PodSpec{Subdomain: "front", SetHostnameAsFQDN: ptr.To(true)},
	}
	if h, err := sandboxHostname(pod, "cluster.local"); err != nil || h != "web.front.ns1.svc.cluster.local" {
		t.Errorf("sandboxHostname = %q, %v", h, err)
	}
	pod.Spec.Subdomain = strings.Repeat("s", 60)
	if h, err := sandboxHostname(pod, "cluster.local"); err == nil {
		t.Errorf("an FQDN over 64 characters was taken: %q", h)
	}
}

func TestManagedHostsFile(t *testing.T) {
	aliases := []corev1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"foo.local", "bar.local"}}}
	got := string(managedHostsFile([]string{"10.88.0.5"}, "www", "front.ns1.svc.cluster.local", aliases))
	lines := nonComment(got)
	want := []string{
		"127.0.0.1\tlocalhost",
		"::1\tlocalhost ip6-localhost ip6-loopback",
		"fe00::0\tip6-localnet",
		"fe00::0\tip6-mcastprefix",
		"fe00::1\tip6-allnodes",
		"fe00::2\tip6-allrouters",
		"10.88.0.5\twww.front.ns1.svc.cluster.local\twww",
		"10.9.9.9\tfoo.local\tbar.local",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("hosts file:\n%s\nwant the lines:\n%s", got, strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(got, "# Kubernetes-managed hosts file.\n") {
		t.Errorf("not the header by which tools know a managed hosts file:\n%s", got)
	}
	if got := nonComment(string(managedHostsFile([]string{"10.88.0.5"}, "web", "", nil))); got[len(got)-1] != "10.88.0.5\tweb" {
		t.Errorf("without a subdomain the pod's line is %q", got[len(got)-1])
	}
}

func TestNodeHostsFileAddsHostAliases(t *testing.T) {
	got := string(nodeHostsFile([]byte("127.0.0.1 localhost\n10.0.0.1 node1"), []corev1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"foo.local"}}}))
	want := []string{"127.0.0.1 localhost", "10.0.0.1 node1", "10.9.9.9\tfoo.local"}
	if lines := nonComment(got); strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("hosts file:\n%s\nwant the lines:\n%s", got, strings.Join(want, "\n"))
	}
}

// nonComment returns the lines of a hosts file that are neither empty nor comments.
func nonComment(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// Against containerd: a pod's /etc/hosts names its IP with its FQDN and hostname,
// then its hostAliases; a host-network pod's is the node's with its hostAliases.
// Both are writable.
func TestEtcHostsIsManaged(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	aliases := []corev1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"foo.local", "bar.local"}}}

	pod := busyboxPod("web", sleepForever)
	pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.HostAliases = "www", "front", aliases
	host := busyboxPod("hostnet", sleepForever)
	host.Spec.HostNetwork, host.Spec.HostAliases = true, aliases
	for _, pd := range []*corev1.Pod{pod, host} {
		if err := p.CreatePod(ctx, pd); err != nil {
			t.Fatal(err)
		}
	}

	st := waitRunningReady(t, p, pod)
	out, err := execOut(t, p, pod, "main", "cat", "/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "# Kubernetes-managed hosts file.\n") {
		t.Errorf("the pod's /etc/hosts does not start with the managed header:\n%s", out)
	}
	for _, want := range []string{
		"127.0.0.1\tlocalhost\n",
		st.PodIP + "\twww.front.default.svc.cluster.local\twww\n",
		"10.9.9.9\tfoo.local\tbar.local\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the pod's /etc/hosts lacks %q:\n%s", want, out)
		}
	}
	if out, err := execOut(t, p, pod, "main", "hostname"); err != nil || out != "www\n" {
		t.Errorf("hostname = %q, %v", out, err)
	}
	if _, err := execOut(t, p, pod, "main", "sh", "-c", "echo 10.1.1.1 added >> /etc/hosts"); err != nil {
		t.Errorf("/etc/hosts is not writable: %v", err)
	}

	waitRunningReady(t, p, host)
	node, err := os.ReadFile(nodeHostsPath)
	if err != nil {
		t.Fatal(err)
	}
	out, err = execOut(t, p, host, "main", "cat", "/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, string(node)) || !strings.Contains(out, "10.9.9.9\tfoo.local\tbar.local\n") {
		t.Errorf("the host-network pod's /etc/hosts:\n%s\nlacks the node's:\n%s\nor the hostAliases", out, node)
	}
}
