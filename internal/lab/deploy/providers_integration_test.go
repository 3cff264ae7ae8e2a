package deploy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vkubelet/vkubelet/internal/lab/interlinkplugin"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// The installs of the providers other than the mock, each a subtest of
// TestTheChartRunsVkubeletOnAVkubeletNode on the shared CRI host. Each passes
// only if the chart hands its provider the Secret its configuration names: a
// provider that cannot read it does not start (kube, remote) or cannot answer
// the node's Ping (interlink), and helm's --wait or the node's Ready fails.

// The kube provider, pointed by a kubeconfig Secret at a target cluster (this
// same one, through an admin kubeconfig with its credentials inline): the node
// is Ready, which it is only while the target's /readyz answers it.
func testKubeProvider(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	const node = "chart-kube"

	kc, err := clientcmd.LoadFromFile(testenv.ControlPlane(t).KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmdapi.FlattenConfig(kc); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, c, ns, "target", map[string][]byte{"kubeconfig": kubeconfig})

	values := h.values(t, node)
	values["provider"] = map[string]any{
		"name":             "kube",
		"kubeconfigSecret": "target",
		"config":           map[string]any{"kubeconfig": "/etc/vkubelet/target/kubeconfig", "clusterID": "chart"},
	}
	install(t, helm, ns, "kube", values)
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)
}

// The remote provider over mutual TLS to a provider sidecar: the chart's image
// serves its mock on the pod's loopback with a serving certificate from the
// sidecar's Secret, requiring a client certificate of the same CA; the node
// trusts that CA and presents its client certificate, both from provider.tlsSecret.
// The node is Ready and a pod runs on it.
func testRemoteProviderOverTLS(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	const node = "chart-remote"

	ca := newCA(t)
	serverCert, serverKey := ca.issue(t, "provider", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "vkubelet", x509.ExtKeyUsageClientAuth)
	createSecret(t, c, ns, "provider-tls", map[string][]byte{"ca.crt": ca.pem, "tls.crt": clientCert, "tls.key": clientKey})
	createSecret(t, c, ns, "sidecar-tls", map[string][]byte{"ca.crt": ca.pem, "tls.crt": serverCert, "tls.key": serverKey})

	endpoint := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	values := h.values(t, node)
	values["provider"] = map[string]any{
		"name":      "remote",
		"tlsSecret": "provider-tls",
		"config": map[string]any{"endpoint": endpoint, "tls": map[string]any{
			"caFile": "/etc/vkubelet/tls/ca.crt", "certFile": "/etc/vkubelet/tls/tls.crt", "keyFile": "/etc/vkubelet/tls/tls.key",
			"serverName": "provider"}},
	}
	values["providerSidecar"] = map[string]any{
		"enabled": true,
		"secret":  "sidecar-tls",
		"args": []string{"provider", "serve", "--provider=mock", "--nodename={{ .Values.nodeName }}", "--listen=" + endpoint,
			"--tls-cert-file=/etc/vkubelet/sidecar/tls.crt", "--tls-private-key-file=/etc/vkubelet/sidecar/tls.key",
			"--client-ca-file=/etc/vkubelet/sidecar/ca.crt"},
	}
	install(t, helm, ns, "remote", values)
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)
	runPodOn(t, c, ns, node)
}

// The remote provider and the chart's default sidecar: the chart's image
// serving its mock on the unix socket in the emptyDir both containers share,
// the node given that endpoint by the chart. The node is Ready and a pod runs.
func testRemoteProviderOnTheSidecarsSocket(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	const node = "chart-sidecar"

	values := h.values(t, node)
	values["provider"] = map[string]any{"name": "remote"}
	values["providerSidecar"] = map[string]any{"enabled": true}
	install(t, helm, ns, "sidecar", values)
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)
	runPodOn(t, c, ns, node)
}

// The interLink provider with a bearer token from provider.tokenSecret, against
// a plugin the test serves on the host's loopback that refuses any request
// without that token: the node is Ready (its Ping is the plugin's /status) and a
// pod runs through the plugin.
func testInterLinkWithAToken(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	const node = "chart-interlink"

	plugin, providerValues := servePlugin(t, c, ns, node)
	values := h.values(t, node)
	values["provider"] = providerValues
	install(t, helm, ns, "interlink", values)
	testenv.WaitNodeReady(t, c, node, 2*time.Minute)
	uid := runPodOn(t, c, ns, node)
	if _, creates, _ := plugin.Submitted(uid); creates != 1 {
		t.Errorf("the plugin was asked to create the pod %d times, want 1", creates)
	}
}

// servePlugin serves an interLink plugin for node on the host's loopback,
// running its pods on a mock, that refuses any request without a token it puts
// in the Secret "plugin-token" of ns; it returns the plugin and the chart's
// provider values for it.
func servePlugin(t *testing.T, c kubernetes.Interface, ns, node string) (*interlinkplugin.Plugin, map[string]any) {
	t.Helper()
	token := rand.Text()
	m, err := mock.New(mock.Config{}, node)
	if err != nil {
		t.Fatal(err)
	}
	plugin := interlinkplugin.New(m, token)
	srv := httptest.NewServer(plugin)
	t.Cleanup(srv.Close)
	createSecret(t, c, ns, "plugin-token", map[string][]byte{"token": []byte(token + "\n")})
	return plugin, map[string]any{
		"name":        "interlink",
		"tokenSecret": "plugin-token",
		"config": map[string]any{"url": srv.URL, "tokenFile": "/etc/vkubelet/token/token",
			"stateFile": "/var/lib/vkubelet/interlink-state.json", "pollInterval": "1s",
			"capacity": map[string]string{"cpu": "4", "memory": "8Gi", "pods": "10"}},
	}
}

// runPodOn runs a pod the scheduler places on node, waits for it to run and
// returns its UID.
func runPodOn(t *testing.T, c kubernetes.Interface, ns, node string) types.UID {
	t.Helper()
	return runOn(t, c, ns, "on-"+node, node).UID
}

func createSecret(t *testing.T, c kubernetes.Interface, ns, name string, data map[string][]byte) {
	t.Helper()
	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testCA issues the remote provider's and the node's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chart-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate for name with usage, and its key, as PEM.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
