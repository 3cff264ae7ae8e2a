package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// etcHosts is where containers find their hosts file, and nodeHostsPath the
	// node's own, which host-network pods start from.
	etcHosts      = "/etc/hosts"
	nodeHostsPath = "/etc/hosts"
	// maxHostname is the longest hostname the kernel takes (64 bytes with the NUL).
	maxHostname = 63
)

// podHostname is the pod's hostname, as the kubelet gives it: spec.hostname, else
// the pod's name, cut to 63 characters (and of a trailing "-" or "."); and its
// domain, <subdomain>.<namespace>.svc.<clusterDomain> when spec.subdomain is set.
func podHostname(pod *corev1.Pod, clusterDomain string) (hostname, domain string) {
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if len(hostname) > maxHostname {
		hostname = strings.TrimRight(hostname[:maxHostname], "-.")
	}
	if pod.Spec.Subdomain != "" {
		domain = pod.Spec.Subdomain + "." + pod.Namespace + ".svc." + clusterDomain
	}
	return hostname, domain
}

// sandboxHostname is the hostname the runtime sets in the pod's UTS namespace: the
// FQDN with setHostnameAsFQDN (an error if the kernel cannot take it), else the
// short name.
func sandboxHostname(pod *corev1.Pod, clusterDomain string) (string, error) {
	hostname, domain := podHostname(pod, clusterDomain)
	if fqdn := pod.Spec.SetHostnameAsFQDN; fqdn != nil && *fqdn && domain != "" {
		hostname += "." + domain
		if len(hostname) > maxHostname+1 {
			return "", fmt.Errorf("setHostnameAsFQDN: the FQDN %q is longer than %d characters", hostname, maxHostname+1)
		}
	}
	return hostname, nil
}

// managedHostsFile is the hosts file of a pod with a network namespace of its own:
// the loopback names, the pod's IPs with its hostname (behind its FQDN when it has
// a subdomain), then the pod's hostAliases.
func managedHostsFile(podIPs []string, hostname, domain string, aliases []corev1.HostAlias) []byte {
	var b strings.Builder
	// The first line is the one by which tools (Kubernetes' e2e tests among
	// them) tell a hosts file the node manages from the image's.
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("# Written by vkubelet for this pod: edits last until a container of the pod starts.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	b.WriteString(hostAliasLines(aliases))
	return []byte(b.String())
}

// nodeHostsFile is the hosts file of a pod in the node's network namespace: the
// node's, then the pod's hostAliases.
func nodeHostsFile(node []byte, aliases []corev1.HostAlias) []byte {
	var b strings.Builder
	b.WriteString("# The node's hosts file, with this pod's hostAliases, copied by vkubelet when a container of the pod started.\n")
	b.Write(node)
	if len(node) > 0 && node[len(node)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(hostAliasLines(aliases))
	return []byte(b.String())
}

// hostAliasLines are the lines of the pod's hostAliases: one per IP, with all its
// names.
func hostAliasLines(aliases []corev1.HostAlias) string {
	if len(aliases) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n# The pod's hostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.String()
}

func (p *Provider) hostsFile(pod *corev1.Pod) string {
	return filepath.Join(p.podDir(pod.UID), "etc-hosts")
}

// mountsEtcHosts reports whether one of c's volumes is mounted at /etc/hosts: the
// container keeps that one.
func mountsEtcHosts(c *corev1.Container) bool {
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == etcHosts {
			return true
		}
	}
	return false
}

// hostsMount (re)writes the pod's hosts file, as the kubelet does before each
// container starts, and returns its read-write mount at /etc/hosts; nil when the
// container has its own /etc/hosts, or when the pod has no IP (the runtime's copy
// of the node's file then stays).
func (p *Provider) hostsMount(pod *corev1.Pod, c *corev1.Container, podIP string) (*runtimeapi.Mount, error) {
	if mountsEtcHosts(c) {
		return nil, nil
	}
	var content []byte
	if p.hostNetwork(pod) {
		node, err := os.ReadFile(nodeHostsPath)
		if err != nil {
			return nil, fmt.Errorf("the node's hosts file: %w", err)
		}
		content = nodeHostsFile(node, pod.Spec.HostAliases)
	} else {
		if podIP == "" {
			return nil, nil
		}
		hostname, domain := podHostname(pod, p.cfg.ClusterDomain)
		content = managedHostsFile([]string{podIP}, hostname, domain, pod.Spec.HostAliases)
	}
	path := p.hostsFile(pod)
	// Written in place, not replaced: running containers have this very file mounted.
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return nil, fmt.Errorf("hosts file: %w", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return nil, fmt.Errorf("hosts file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: etcHosts, HostPath: path}, nil
}

// PodHostsFile is the hosts file the provider writes for a pod with a network
// namespace of its own, no subdomain and no hostAliases. The CRI benchmark mounts
// it into its raw pods, to compare like with like.
func PodHostsFile(podIP, hostname string) []byte {
	var ips []string
	if podIP != "" {
		ips = []string{podIP}
	}
	return managedHostsFile(ips, hostname, "", nil)
}
