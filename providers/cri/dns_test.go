package cri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestParseResolvConfReadsItAsTheKubeletDoes(t *testing.T) {
	rc, err := parseResolvConf(strings.NewReader(`# a comment
; another
nameserver 10.1.1.1
domain ignored.example
search old.example
nameserver 10.2.2.2   # two
search corp.example. . lab.example
options ndots:2 timeout:1
options ndots:3 rotate
`))
	if err != nil {
		t.Fatal(err)
	}
	want := resolvConf{
		servers:  []string{"10.1.1.1", "10.2.2.2"},
		searches: []string{"corp.example", "lab.example"},
		options:  []string{"ndots:3", "timeout:1", "rotate"},
	}
	if !reflect.DeepEqual(rc, want) {
		t.Errorf("parsed %+v, want %+v", rc, want)
	}
	if _, err := parseResolvConf(strings.NewReader("nameserver\n")); err == nil {
		t.Error("a nameserver line without an address parsed")
	}
}

func TestPodDNSConfigFollowsThePolicy(t *testing.T) {
	node := resolvConf{
		servers:  []string{"192.168.1.1"},
		searches: []string{"corp.example", "cluster.local"},
		options:  []string{"timeout:2"},
	}
	cluster := dnsSettings{clusterDNS: []string{"10.0.0.10"}, clusterDomain: "cluster.local", node: node}
	noCluster := dnsSettings{clusterDomain: "cluster.local", node: node}
	clusterSearch := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}

	type want struct {
		servers, searches, options []string
		warnings                   []string // reasons
	}
	cases := []struct {
		name        string
		policy      corev1.DNSPolicy
		hostNetwork bool
		dnsConfig   *corev1.PodDNSConfig
		settings    dnsSettings
		want        want
	}{
		{
			name: "ClusterFirst: the cluster's nameservers, its search list before the node's, ndots:5",
			// "cluster.local" of the node's list is not repeated.
			policy: corev1.DNSClusterFirst, settings: cluster,
			want: want{servers: []string{"10.0.0.10"}, searches: clusterSearch, options: []string{"ndots:5"}},
		},
		{
			name: "an empty policy is ClusterFirst", settings: cluster,
			want: want{servers: []string{"10.0.0.10"}, searches: clusterSearch, options: []string{"ndots:5"}},
		},
		{
			name:   "ClusterFirst on the host network is Default",
			policy: corev1.DNSClusterFirst, hostNetwork: true, settings: cluster,
			want: want{servers: node.servers, searches: node.searches, options: node.options},
		},
		{
			name:   "ClusterFirstWithHostNet on the host network is ClusterFirst",
			policy: corev1.DNSClusterFirstWithHostNet, hostNetwork: true, settings: cluster,
			want: want{servers: []string{"10.0.0.10"}, searches: clusterSearch, options: []string{"ndots:5"}},
		},
		{
			name:   "ClusterFirst without cluster DNS falls back to Default, with a warning",
			policy: corev1.DNSClusterFirst, settings: noCluster,
			want: want{servers: node.servers, searches: node.searches, options: node.options, warnings: []string{"MissingClusterDNS"}},
		},
		{
			name:   "Default is the node's resolv.conf",
			policy: corev1.DNSDefault, settings: cluster,
			want: want{servers: node.servers, searches: node.searches, options: node.options},
		},
		{
			name:   "None is the pod's dnsConfig alone",
			policy: corev1.DNSNone, settings: cluster,
			dnsConfig: &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1"},
				Searches:    []string{"a.example"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "edns0"}},
			},
			want: want{servers: []string{"1.1.1.1"}, searches: []string{"a.example"}, options: []string{"ndots:1", "edns0"}},
		},
		{
			name:   "the pod's dnsConfig is appended without duplicates, its options win",
			policy: corev1.DNSClusterFirst, settings: cluster,
			dnsConfig: &corev1.PodDNSConfig{
				Nameservers: []string{"10.0.0.10", "1.1.1.1"},
				Searches:    []string{"svc.cluster.local", "extra.example"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "single-request-reopen"}},
			},
			want: want{
				servers:  []string{"10.0.0.10", "1.1.1.1"},
				searches: append(append([]string{}, clusterSearch...), "extra.example"),
				options:  []string{"ndots:2", "single-request-reopen"},
			},
		},
		{
			name:   "more than three nameservers are cut, with a warning",
			policy: corev1.DNSDefault, settings: cluster,
			dnsConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "2.2.2.2", "3.3.3.3"}},
			want: want{
				servers:  []string{"192.168.1.1", "1.1.1.1", "2.2.2.2"},
				searches: node.searches, options: node.options, warnings: []string{"DNSConfigForming"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"},
				Spec:       corev1.PodSpec{DNSPolicy: c.policy, HostNetwork: c.hostNetwork, DNSConfig: c.dnsConfig},
			}
			cfg, warnings := podDNSConfig(pod, c.settings)
			if !reflect.DeepEqual(cfg.Servers, c.want.servers) {
				t.Errorf("servers = %q, want %q", cfg.Servers, c.want.servers)
			}
			if !reflect.DeepEqual(cfg.Searches, c.want.searches) {
				t.Errorf("searches = %q, want %q", cfg.Searches, c.want.searches)
			}
			if !reflect.DeepEqual(cfg.Options, c.want.options) {
				t.Errorf("options = %q, want %q", cfg.Options, c.want.options)
			}
			var reasons []string
			for _, w := range warnings {
				reasons = append(reasons, w.reason)
			}
			if !reflect.DeepEqual(reasons, c.want.warnings) {
				t.Errorf("warnings = %+v, want reasons %q", warnings, c.want.warnings)
			}
		})
	}
}

func TestLimitSearchesKeepsWhatTheKubeletKeeps(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = "d" + strings.Repeat("x", i) + ".example"
	}
	long := strings.Repeat("l", 254)
	big := make([]string, 10)
	for i := range big {
		big[i] = strings.Repeat(string(rune('a'+i)), 250) // 10×250 + 9 spaces > 2048
	}
	cases := []struct {
		name string
		in   []string
		want []string
		cut  bool
	}{
		{"within the limits", []string{"a", "b"}, []string{"a", "b"}, false},
		{"the first 32 domains", many, many[:32], true},
		{"a domain over 253 characters is dropped", []string{"a", long, "b"}, []string{"a", "b"}, true},
		// 8 domains are 8×250 + 7 = 2007 characters, a ninth would make 2258.
		{"the first domains within 2048 characters", big, big[:8], true},
	}
	for _, c := range cases {
		got, cut := limitSearches(append([]string(nil), c.in...))
		if !reflect.DeepEqual(got, c.want) || cut != c.cut {
			t.Errorf("%s: got %d domains (cut %v), want %d (cut %v)", c.name, len(got), cut, len(c.want), c.cut)
		}
	}
}

// Against containerd: a ClusterFirst pod's /etc/resolv.conf names the cluster DNS
// with the cluster's search list before the node's, a Default pod's is the node's
// (the configured resolvConf), a None pod's is its dnsConfig alone; in the node's
// network, a ClusterFirstWithHostNet pod's names the cluster DNS and a ClusterFirst
// pod's is the node's.
func TestResolvConfFollowsDNSPolicy(t *testing.T) {
	needRuntime(t)
	cfg := testConfig(t)
	cfg.ClusterDNS = []string{"10.0.0.10"}
	cfg.ResolvConf = filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(cfg.ResolvConf, []byte("nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := newProvider(t, cfg)
	ctx := context.Background()

	cluster := busyboxPod("cluster", sleepForever)
	cluster.Spec.DNSPolicy = corev1.DNSClusterFirst
	def := busyboxPod("default", sleepForever)
	def.Spec.DNSPolicy = corev1.DNSDefault
	none := busyboxPod("none", sleepForever)
	none.Spec.DNSPolicy = corev1.DNSNone
	none.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{"192.0.2.1"},
		Searches:    []string{"a.example"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}},
	}
	// In the node's network: ClusterFirstWithHostNet gets the cluster's DNS,
	// ClusterFirst the node's.
	hostNet := busyboxPod("hostnet", sleepForever)
	hostNet.Spec.HostNetwork, hostNet.Spec.DNSPolicy = true, corev1.DNSClusterFirstWithHostNet
	hostFirst := busyboxPod("hostfirst", sleepForever)
	hostFirst.Spec.HostNetwork, hostFirst.Spec.DNSPolicy = true, corev1.DNSClusterFirst
	want := map[*corev1.Pod]resolvConf{
		hostNet: {
			servers:  []string{"10.0.0.10"},
			searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
			options:  []string{"ndots:5"},
		},
		hostFirst: {servers: []string{"192.0.2.53"}, searches: []string{"corp.example"}, options: []string{"timeout:2"}},
		cluster: {
			servers:  []string{"10.0.0.10"},
			searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
			options:  []string{"ndots:5"},
		},
		def:  {servers: []string{"192.0.2.53"}, searches: []string{"corp.example"}, options: []string{"timeout:2"}},
		none: {servers: []string{"192.0.2.1"}, searches: []string{"a.example"}, options: []string{"ndots:1"}},
	}
	for pod := range want {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatalf("CreatePod %s: %v", pod.Name, err)
		}
	}
	for pod, w := range want {
		waitRunningReady(t, p, pod)
		out, err := execOut(t, p, pod, "main", "cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatalf("%s: cat /etc/resolv.conf: %v", pod.Name, err)
		}
		got, err := parseResolvConf(strings.NewReader(out))
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("%s (dnsPolicy %s): /etc/resolv.conf\n%s\nreads %+v, %v; want %+v", pod.Name, pod.Spec.DNSPolicy, out, got, err, w)
		}
	}
}

// A dnsPolicy None pod without nameservers is refused: the runtime would give it
// the node's resolv.conf.
func TestDNSPolicyNoneNeedsNameservers(t *testing.T) {
	p := &Provider{cfg: Config{}.withDefaults()}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone}}
	if err := p.validate(pod); !errors.Is(err, errdefs.ErrInvalidInput) {
		t.Errorf("validate = %v, want InvalidInput", err)
	}
}
