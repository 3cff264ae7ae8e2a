package cri

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's limits on a pod's resolver configuration: more nameservers are
// dropped (glibc reads only three), and the search list is cut to what the API
// server's validation allows.
const (
	maxNameservers   = 3
	maxSearchDomains = 32
	maxSearchChars   = 2048 // the search list, joined by spaces
	maxSearchDomain  = 253  // one domain; longer ones abort some resolvers
	// clusterNdots makes every name of fewer than five dots go through the
	// cluster's search list first, so that "svc" and "svc.ns" resolve.
	clusterNdots = "ndots:5"
	// maxResolvConf bounds how much of the node's resolv.conf is read.
	maxResolvConf = 1 << 20
)

// resolvConf is what a resolv.conf says: nameservers in order, the search list
// (of the last search line, as the resolver reads it) and the options.
type resolvConf struct {
	servers, searches, options []string
}

// parseResolvConf reads a resolv.conf file the way the kubelet does: nameserver
// lines add up, the last search line wins (its domains without a trailing dot, and
// "." left out), options lines add up with a later option replacing an earlier one
// of the same name. Other keywords ("domain", "sortlist") are ignored.
func parseResolvConf(r io.Reader) (resolvConf, error) {
	var rc resolvConf
	sc := bufio.NewScanner(io.LimitReader(r, maxResolvConf))
	sc.Buffer(make([]byte, 64*1024), maxResolvConf)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				return resolvConf{}, fmt.Errorf("nameserver line without an address")
			}
			rc.servers = append(rc.servers, fields[1])
		case "search":
			rc.searches = nil
			for _, d := range fields[1:] {
				if d != "." {
					rc.searches = append(rc.searches, strings.TrimSuffix(d, "."))
				}
			}
		case "options":
			rc.options = mergeOptions(rc.options, fields[1:])
		}
	}
	return rc, sc.Err()
}

// readResolvConf parses the resolv.conf at path.
func readResolvConf(path string) (resolvConf, error) {
	f, err := os.Open(path)
	if err != nil {
		return resolvConf{}, err
	}
	defer f.Close()
	rc, err := parseResolvConf(f)
	if err != nil {
		return resolvConf{}, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}

// optionName is the name of a resolver option: "ndots" of "ndots:2".
func optionName(opt string) string {
	name, _, _ := strings.Cut(opt, ":")
	return name
}

// mergeOptions returns base with each of more replacing the option of the same
// name, or appended if base has none; the order is kept, so the result is the
// same for the same input (the kubelet's goes through a map).
func mergeOptions(base, more []string) []string {
	out := append([]string(nil), base...)
	for _, opt := range more {
		replaced := false
		for i := range out {
			if optionName(out[i]) == optionName(opt) {
				out[i], replaced = opt, true
				break
			}
		}
		if !replaced {
			out = append(out, opt)
		}
	}
	return out
}

// appendUnique appends to list the items it does not have yet, dropping
// duplicates within list too.
func appendUnique(list []string, items ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), list...), items...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// podWarning is something wrong with the pod's configuration that the kubelet
// would report as a Warning Event. The provider contract has no way to record
// events, so the provider logs them.
type podWarning struct {
	reason, message string
}

// dnsSettings are the node's inputs to every pod's resolver configuration.
type dnsSettings struct {
	clusterDNS    []string
	clusterDomain string
	node          resolvConf // the node's resolv.conf
}

// podUsesNodeResolvConf reports whether the pod's resolver configuration starts
// from the node's resolv.conf, which must then be read: all policies but None.
func podUsesNodeResolvConf(pod *corev1.Pod) bool {
	return pod.Spec.DNSPolicy != corev1.DNSNone
}

// podDNSConfig is the resolver configuration of the pod's sandbox, derived as the
// kubelet derives it:
//
//   - ClusterFirst (and an empty policy, the API server's default): the cluster's
//     nameservers, the search list <namespace>.svc.<domain>, svc.<domain>,
//     <domain> followed by the node's, and ndots:5. A host-network pod gets
//     Default instead, and so does every pod while no cluster DNS is configured
//     (with a MissingClusterDNS warning).
//   - ClusterFirstWithHostNet: ClusterFirst, host network or not.
//   - Default: the node's resolv.conf as it is.
//   - None: nothing but the pod's dnsConfig.
//
// Then the pod's dnsConfig is merged in (nameservers and searches appended without
// duplicates, options replacing those of the same name) and the kubelet's limits
// applied, each cut reported as a DNSConfigForming warning.
func podDNSConfig(pod *corev1.Pod, s dnsSettings) (*runtimeapi.DNSConfig, []podWarning) {
	var warnings []podWarning
	cluster := false
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone, corev1.DNSDefault:
	case corev1.DNSClusterFirstWithHostNet:
		cluster = true
	default: // ClusterFirst, or empty
		cluster = !pod.Spec.HostNetwork
	}
	if cluster && len(s.clusterDNS) == 0 {
		cluster = false
		warnings = append(warnings, podWarning{"MissingClusterDNS", fmt.Sprintf(
			"pod %s/%s: the node has no cluster DNS configured (clusterDNS), so dnsPolicy %q falls back to %q",
			pod.Namespace, pod.Name, dnsPolicy(pod), corev1.DNSDefault)})
	}
	cfg := &runtimeapi.DNSConfig{}
	switch {
	case pod.Spec.DNSPolicy == corev1.DNSNone:
	case cluster:
		cfg.Servers = append([]string(nil), s.clusterDNS...)
		cfg.Searches = append([]string(nil), s.node.searches...)
		if d := s.clusterDomain; d != "" {
			cfg.Searches = appendUnique([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, s.node.searches...)
		}
		cfg.Options = []string{clusterNdots}
	default:
		cfg.Servers = append([]string(nil), s.node.servers...)
		cfg.Searches = append([]string(nil), s.node.searches...)
		cfg.Options = append([]string(nil), s.node.options...)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = appendUnique(cfg.Servers, dc.Nameservers...)
		cfg.Searches = appendUnique(cfg.Searches, dc.Searches...)
		var opts []string
		for _, o := range dc.Options {
			if o.Value != nil && *o.Value != "" {
				opts = append(opts, o.Name+":"+*o.Value)
			} else {
				opts = append(opts, o.Name)
			}
		}
		cfg.Options = mergeOptions(cfg.Options, opts)
	}
	if len(cfg.Servers) > maxNameservers {
		cfg.Servers = cfg.Servers[:maxNameservers]
		warnings = append(warnings, podWarning{"DNSConfigForming", fmt.Sprintf(
			"pod %s/%s: more than %d nameservers, only these kept: %s", pod.Namespace, pod.Name, maxNameservers, strings.Join(cfg.Servers, " "))})
	}
	if searches, cut := limitSearches(cfg.Searches); cut {
		cfg.Searches = searches
		warnings = append(warnings, podWarning{"DNSConfigForming", fmt.Sprintf(
			"pod %s/%s: the search list is over the limits (%d domains of at most %d characters, %d characters in all), only these kept: %s",
			pod.Namespace, pod.Name, maxSearchDomains, maxSearchDomain, maxSearchChars, strings.Join(searches, " "))})
	}
	return cfg, warnings
}

// limitSearches cuts a search list to the kubelet's limits: the first
// maxSearchDomains domains, without those longer than maxSearchDomain, and then
// as many from the start as fit in maxSearchChars. cut reports whether anything
// was dropped.
func limitSearches(searches []string) (out []string, cut bool) {
	if len(searches) > maxSearchDomains {
		searches, cut = searches[:maxSearchDomains], true
	}
	length := -1 // the spaces between domains
	for _, d := range searches {
		if len(d) > maxSearchDomain {
			cut = true
			continue
		}
		if length+1+len(d) > maxSearchChars {
			return out, true
		}
		length += 1 + len(d)
		out = append(out, d)
	}
	return out, cut
}

func dnsPolicy(pod *corev1.Pod) corev1.DNSPolicy {
	if pod.Spec.DNSPolicy == "" {
		return corev1.DNSClusterFirst
	}
	return pod.Spec.DNSPolicy
}

// dnsConfig is the pod's resolver configuration for this node (see podDNSConfig).
func (p *Provider) dnsConfig(pod *corev1.Pod) (*runtimeapi.DNSConfig, []podWarning, error) {
	s := dnsSettings{clusterDNS: p.cfg.ClusterDNS, clusterDomain: p.cfg.ClusterDomain}
	if podUsesNodeResolvConf(pod) {
		rc, err := readResolvConf(p.cfg.ResolvConf)
		if err != nil {
			return nil, nil, fmt.Errorf("the node's resolver configuration: %w", err)
		}
		s.node = rc
	}
	cfg, warnings := podDNSConfig(pod, s)
	return cfg, warnings, nil
}

// NodeDNSConfig is the resolver configuration the provider gives a pod that uses
// the node's (dnsPolicy Default, or ClusterFirst on a node without clusterDNS):
// the resolv.conf at path within the kubelet's limits. The CRI benchmark runs its
// raw pods with it, to compare like with like.
func NodeDNSConfig(path string) (*runtimeapi.DNSConfig, error) {
	rc, err := readResolvConf(path)
	if err != nil {
		return nil, err
	}
	cfg, _ := podDNSConfig(&corev1.Pod{Spec: corev1.PodSpec{DNSPolicy: corev1.DNSDefault}}, dnsSettings{node: rc})
	return cfg, nil
}
