// Package clusternet gives the pods of a CRI node what a kubelet's node gives
// them besides containers: Services, by kube-proxy, and a cluster DNS, by CoreDNS.
// A pod then resolves my-svc.my-ns.svc.cluster.local, reaches ClusterIPs and
// NodePorts, and an in-cluster client reaches the API server through the
// `kubernetes` Service.
//
// Both run inside the node's network namespace (package netns), where the CRI
// runtime's pod network lives (crienv with Options.Netns): kube-proxy programs that
// namespace's netfilter tables only, so the host's firewall and the nodes of
// parallel tests are left alone. The API server listens on the host's loopback; a
// forwarder brings it into the namespace at the same address (for kube-proxy's and
// CoreDNS's kubeconfigs) and at a node-local address, the endpoint of the
// `kubernetes` Service. CoreDNS serves the kube-dns Service from another node-local
// address. These addresses are the same in every node's namespace, so one
// EndpointSlice per Service serves all nodes, as the API server's and a DNS
// DaemonSet's endpoints do in a real cluster.
//
// Used by `vkubeletctl up --provider cri` and the CRI provider's end-to-end tests; a
// production node runs the cluster's own kube-proxy and DNS instead.
package clusternet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

const (
	// DNSServiceIP is the ClusterIP of kube-system/kube-dns: the nodes'
	// --cluster-dns (the CRI provider's clusterDNS).
	DNSServiceIP = "10.0.0.10"
	// ClusterDomain is the nodes' --cluster-domain, which CoreDNS serves.
	ClusterDomain = "cluster.local"

	// apiServerAddress and dnsAddress are the node-local endpoints of the
	// `kubernetes` and kube-dns Services, on the loopback of every node's
	// namespace. 10.214.0.0/16 is next to netns's veth range and used by nothing
	// else here.
	apiServerAddress = "10.214.0.1"
	dnsAddress       = "10.214.0.10"

	// Ports inside the namespace, which is the node's own.
	kubeProxyHealthPort  = 10256
	kubeProxyMetricsPort = 10249
	coreDNSHealthPort    = 8080
	coreDNSReadyPort     = 8181

	// ModeIPTables and ModeNFTables are kube-proxy's modes.
	ModeIPTables = "iptables"
	ModeNFTables = "nftables"
)

// Config says where to run and for which node.
type Config struct {
	// ControlPlane is the cluster: its admin credential creates the Services'
	// endpoints and RBAC, its CA issues kube-proxy's and CoreDNS's credentials.
	ControlPlane *controlplane.ControlPlane
	// Link is the node's network namespace, where the pods' network is.
	Link *netns.Link
	// NodeName is the node kube-proxy serves (--hostname-override).
	NodeName string
	// PodCIDR is the node's pod network (kube-proxy's cluster CIDR: traffic from
	// outside it to a Service is masqueraded).
	PodCIDR string
	// Mode is kube-proxy's mode: ModeIPTables (default) or ModeNFTables.
	Mode string
	// Dir holds configuration and logs; empty: a new temporary directory,
	// removed by Stop.
	Dir string
	// Out receives progress; nil: silent.
	Out io.Writer
}

// Network is a running kube-proxy and CoreDNS for one node's namespace.
type Network struct {
	// DNS is the cluster DNS Service's IP and Domain the cluster domain: what a
	// node passes to its pods (the CRI provider's clusterDNS and clusterDomain).
	DNS    string
	Domain string
	Dir    string

	cfg        Config
	ownsDir    bool
	forwarders []*netns.Forwarder
	daemons    []*spawn.Process
}

// Start brings the node's namespace to what kube-proxy expects, publishes the
// `kubernetes` and kube-dns Services' endpoints, starts CoreDNS and kube-proxy in
// the namespace, and returns once CoreDNS is ready and kube-proxy has programmed
// the kube-dns Service.
func Start(ctx context.Context, cfg Config) (*Network, error) {
	if cfg.ControlPlane == nil || cfg.Link == nil || cfg.NodeName == "" || cfg.PodCIDR == "" {
		return nil, errors.New("clusternet: ControlPlane, Link, NodeName and PodCIDR are required")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeIPTables
	}
	if cfg.Mode != ModeIPTables && cfg.Mode != ModeNFTables {
		return nil, fmt.Errorf("clusternet: mode %q is neither %s nor %s", cfg.Mode, ModeIPTables, ModeNFTables)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	coredns, err := controlplane.EnsureCoreDNS(ctx, cfg.Out)
	if err != nil {
		return nil, err
	}
	n := &Network{DNS: DNSServiceIP, Domain: ClusterDomain, Dir: cfg.Dir, cfg: cfg}
	if n.Dir == "" {
		if n.Dir, err = os.MkdirTemp("", "clusternet-"); err != nil {
			return nil, err
		}
		n.ownsDir = true
	} else if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := n.start(ctx, coredns); err != nil {
		n.Stop()
		return nil, fmt.Errorf("clusternet: %w", err)
	}
	fmt.Fprintf(cfg.Out, "clusternet: kube-proxy (%s) and CoreDNS serving node %s in %s in %s\n",
		cfg.Mode, cfg.NodeName, cfg.Link.Name, time.Since(started).Round(time.Millisecond))
	return n, nil
}

func (n *Network) start(ctx context.Context, coredns string) error {
	link, cp := n.cfg.Link, n.cfg.ControlPlane
	for _, ip := range []string{apiServerAddress, dnsAddress} {
		if err := link.AddLocalAddress(ip); err != nil {
			return err
		}
	}
	// Routing between the pods' bridge, the namespace's own addresses and the
	// veth; and bridged pod-to-pod traffic through netfilter, without which the
	// reply of a pod reached through a ClusterIP on the same bridge skips the
	// reverse translation (kube-proxy's documented requirement).
	for _, s := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.bridge.bridge-nf-call-iptables", "1"}} {
		if err := link.Sysctl(s[0], s[1]); err != nil {
			return fmt.Errorf("%w (is the br_netfilter module loaded?)", err)
		}
	}
	// Processes of the namespace (CoreDNS's upstream lookups aside) reach
	// ClusterIPs as a node's do: routed towards the node's gateway, translated on
	// the way out by kube-proxy's rules.
	if _, err := link.Run("ip", "route", "replace", controlplane.ServiceCIDR, "via", link.HostIP); err != nil {
		return err
	}
	api := "127.0.0.1:" + strconv.Itoa(cp.APIPort())
	for _, addr := range []string{api, net.JoinHostPort(apiServerAddress, strconv.Itoa(cp.APIPort()))} {
		f, err := link.Forward(addr, api)
		if err != nil {
			return err
		}
		n.forwarders = append(n.forwarders, f)
	}
	if err := publishServices(ctx, cp, cp.APIPort()); err != nil {
		return err
	}
	t := time.Now()
	if err := n.startCoreDNS(ctx, coredns); err != nil {
		return err
	}
	fmt.Fprintf(n.cfg.Out, "clusternet: CoreDNS ready in %s\n", time.Since(t).Round(time.Millisecond))
	return n.startKubeProxy(ctx)
}

// startCoreDNS runs CoreDNS on dnsAddress:53 in the namespace, answering for the
// cluster domain from the API (as the user clusternetDNSUser) and forwarding the
// rest to the host's resolvers.
func (n *Network) startCoreDNS(ctx context.Context, bin string) error {
	kubeconfig, err := n.cfg.ControlPlane.UserKubeconfig("clusternet-coredns", dnsUser)
	if err != nil {
		return err
	}
	corefile := fmt.Sprintf(`.:53 {
    bind %[1]s
    errors
    health 127.0.0.1:%[2]d
    ready 127.0.0.1:%[3]d
    kubernetes %[4]s in-addr.arpa ip6.arpa {
        kubeconfig %[5]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
    loadbalance
}
`, dnsAddress, coreDNSHealthPort, coreDNSReadyPort, ClusterDomain, kubeconfig)
	path := filepath.Join(n.Dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return err
	}
	d, err := n.run("coredns", bin, "-conf", path)
	if err != nil {
		return err
	}
	return waitFor(ctx, d, 2*time.Minute, func() error {
		return n.httpOK(fmt.Sprintf("http://127.0.0.1:%d/ready", coreDNSReadyPort))
	})
}

// startKubeProxy runs kube-proxy for the node in the namespace, as the user the
// bootstrap RBAC policy gives kube-proxy's permissions (system:node-proxier).
// kube-proxy waits (up to 30 s) for the Node to have an address: start it once
// the node has registered. NodePorts are served on the node's address.
func (n *Network) startKubeProxy(ctx context.Context) error {
	cp := n.cfg.ControlPlane
	kubeconfig, err := cp.UserKubeconfig("clusternet-kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	// Conntrack's table size is the machine's, not the namespace's, and a node
	// on a test machine has no business tuning it: zeros leave conntrack's size
	// and timeouts as they are.
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: %q
healthzBindAddress: "127.0.0.1:%d"
metricsBindAddress: "127.0.0.1:%d"
mode: %q
clusterCIDR: %q
nodePortAddresses: [primary]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, n.cfg.NodeName, n.cfg.Link.NodeIP, kubeProxyHealthPort, kubeProxyMetricsPort, n.cfg.Mode, n.cfg.PodCIDR)
	path := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	d, err := n.run("kube-proxy", cp.Binaries.KubeProxy, "--config", path)
	if err != nil {
		return err
	}
	// Ready when the kube-dns Service is in the namespace's tables: the first
	// full sync is done.
	return waitFor(ctx, d, 2*time.Minute, func() error {
		rules, err := n.Rules()
		if err != nil {
			return err
		}
		if !strings.Contains(rules, DNSServiceIP) {
			return errors.New("kube-dns Service not programmed yet")
		}
		return nil
	})
}

// Rules returns kube-proxy's rules in the namespace: iptables-save's tables,
// or the nftables ruleset.
func (n *Network) Rules() (string, error) {
	if n.cfg.Mode == ModeNFTables {
		return n.cfg.Link.Run("nft", "list", "ruleset")
	}
	return n.cfg.Link.Run("iptables-save")
}

// httpOK GETs url from inside the namespace.
func (n *Network) httpOK(url string) error {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
				return n.cfg.Link.Dial(addr)
			},
			DisableKeepAlives: true,
		},
	}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Stop ends kube-proxy and CoreDNS and the forwarders. The namespace's rules go
// with the namespace; the Services' endpoints stay, for other nodes.
func (n *Network) Stop() {
	for i := len(n.daemons) - 1; i >= 0; i-- {
		n.daemons[i].Stop(10 * time.Second)
	}
	for _, f := range n.forwarders {
		_ = f.Close()
	}
	if n.ownsDir {
		_ = os.RemoveAll(n.Dir)
	}
}

// run starts bin in the namespace, logging to <Dir>/<name>.log.
func (n *Network) run(name, bin string, args ...string) (*spawn.Process, error) {
	p, err := spawn.StartLogged(name, filepath.Join(n.Dir, name+".log"), n.cfg.Link.Command(bin, args...))
	if err != nil {
		return nil, err
	}
	n.daemons = append(n.daemons, p)
	return p, nil
}

// waitFor polls ready until it succeeds, p exits or timeout passes.
func waitFor(ctx context.Context, p *spawn.Process, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited (%v):\n%s", p.Name, p.Err(), p.Tail(25))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%v):\n%s", p.Name, timeout, err, p.Tail(25))
		}
	}
}
