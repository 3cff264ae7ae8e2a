package clusternet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{})
}

// In each of kube-proxy's modes, from inside the node's namespace: a Service
// created after the start resolves through the kube-dns ClusterIP (so kube-proxy
// programmed kube-dns, and CoreDNS reads the API as its own user), and the
// `kubernetes` Service's ClusterIP leads to the API server.
func TestKubeProxyAndCoreDNSServeTheNamespace(t *testing.T) {
	for _, mode := range []string{ModeIPTables, ModeNFTables} {
		t.Run(mode, func(t *testing.T) {
			cp := testenv.ControlPlane(t)
			testenv.Require(t, netns.Available())
			link, err := netns.Create("vkcn")
			if err != nil {
				t.Fatal(err)
			}
			defer link.Remove()
			ctx := context.Background()
			// kube-proxy waits for its Node's address; here no agent registers one.
			c, ns := testenv.Client(t), testenv.Namespace(t)
			node := "clusternet-" + mode
			created, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: link.NodeIP}}
			if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
			n, err := Start(ctx, Config{ControlPlane: cp, Link: link, NodeName: node,
				PodCIDR: "10.244.250.0/24", Mode: mode, Out: os.Stderr, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Stop()

			svc, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "db"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var conn net.Conn
				err := link.Do(func() (err error) {
					conn, err = net.Dial(network, net.JoinHostPort(DNSServiceIP, "53"))
					return err
				})
				return conn, err
			}}
			for name, want := range map[string]string{
				"db." + ns + ".svc." + ClusterDomain:      svc.Spec.ClusterIP,
				"kubernetes.default.svc." + ClusterDomain: "10.0.0.1",
			} {
				testenv.Eventually(t, 30*time.Second, func() (bool, string) {
					ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					addrs, err := resolver.LookupHost(ctx, name)
					return err == nil && len(addrs) == 1 && addrs[0] == want, fmt.Sprintf("%s: %v %v, want %s", name, addrs, err, want)
				})
			}
			// The API server through the `kubernetes` ClusterIP: a TLS handshake
			// whose certificate names the Service's address.
			conn, err := link.Dial("10.0.0.1:443")
			if err != nil {
				t.Fatalf("dialing the kubernetes Service from the namespace: %v", err)
			}
			defer conn.Close()
			pem, err := os.ReadFile(cp.PKI.CACert)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(pem)
			if err := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "10.0.0.1"}).HandshakeContext(ctx); err != nil {
				t.Errorf("TLS to the API server through the kubernetes Service: %v", err)
			}
			testenv.Eventually(t, 10*time.Second, func() (bool, string) {
				rules, err := n.Rules()
				return err == nil && strings.Contains(rules, svc.Spec.ClusterIP),
					fmt.Sprintf("kube-proxy's %s rules lack the new Service's %s (%v):\n%s", mode, svc.Spec.ClusterIP, err, rules)
			})
		})
	}
}
