package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// certPEM is a self-signed certificate for subject, PEM-encoded.
func certPEM(t *testing.T, subject pkix.Name) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: subject,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestAsNode(t *testing.T) {
	node := certPEM(t, pkix.Name{CommonName: "system:node:vk", Organization: []string{"system:nodes"}})
	admin := certPEM(t, pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}})
	nodeWithoutGroup := certPEM(t, pkix.Name{CommonName: "system:node:vk"})
	pair := filepath.Join(t.TempDir(), "pair.pem")
	// The certificate store writes the key before the certificate.
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("not parsed")})
	if err := os.WriteFile(pair, append(key, node...), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  *rest.Config
		want bool
	}{
		"node certificate data":       {&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: node}}, true},
		"node certificate in a pair":  {&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: pair, KeyFile: pair}}, true},
		"admin certificate":           {&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: admin}}, false},
		"node name outside the group": {&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: nodeWithoutGroup}}, false},
		"bearer token":                {&rest.Config{BearerToken: "x"}, false},
		"missing certificate file":    {&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: pair + ".gone"}}, false},
	} {
		if got := asNode(c.cfg); got != c.want {
			t.Errorf("%s: asNode = %v, want %v", name, got, c.want)
		}
	}
}

func TestMetricsAddrMustBeLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:10255": true, "[::1]:10255": true, "localhost:0": true,
		":10255": false, "0.0.0.0:10255": false, "10.0.0.5:10255": false, "[::]:1": false, "nonsense": false,
	} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	// Upstream's default is refused with the flag that replaces it.
	if err := checkLoopback(":10255"); err == nil || !strings.Contains(err.Error(), "--metrics-addr 127.0.0.1:10255") {
		t.Errorf("checkLoopback(\":10255\") = %v, want the replacement --metrics-addr 127.0.0.1:10255 named", err)
	}
}

func TestTheServingCSRIsApprovedWithTheBootstrapCredentialUnlessToldOtherwise(t *testing.T) {
	admin, boot := &rest.Config{Host: "admin"}, &rest.Config{Host: "bootstrap"}
	dir := t.TempDir()
	kubeconfig, token := filepath.Join(dir, "bootstrap.kubeconfig"), filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("a-service-account-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	// As the chart writes it: the ServiceAccount's token file is the credential.
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://from-file}\nusers:\n- name: u\n  user: {tokenFile: "+token+"}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // the approver's host; "" for none (the node's own credential)
	}{
		{"not approving", Config{BootstrapRESTConfig: boot}, ""},
		{"no bootstrap", Config{ApproveServingCSR: true}, ""},
		{"an approver given", Config{ApproveServingCSR: true, ServingCSRApprover: admin, BootstrapRESTConfig: boot}, "admin"},
		{"bootstrap config", Config{ApproveServingCSR: true, BootstrapRESTConfig: boot}, "bootstrap"},
		{"bootstrap kubeconfig", Config{ApproveServingCSR: true, BootstrapKubeconfig: kubeconfig}, "https://from-file"},
	} {
		got, err := servingApprover(tc.cfg)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if host := ""; got != nil {
			host = got.Host
			if host != tc.want {
				t.Errorf("%s: approver %q, want %q", tc.name, host, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s: no approver, want %q", tc.name, tc.want)
		}
	}
	if _, err := servingApprover(Config{ApproveServingCSR: true, BootstrapKubeconfig: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing bootstrap kubeconfig was accepted")
	}
}
