package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(t *testing.T, path string) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(readCert(t, path))
	return p
}

// The front-proxy client certificate must chain to the front-proxy CA only: an
// aggregated API server trusts request headers from it, so a certificate of the
// cluster CA must not pass for it, nor it for a cluster client.
func TestFrontProxyClientIsSignedByItsOwnCA(t *testing.T) {
	pki, err := generatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, pki.FrontProxyClientCert)
	if c.Subject.CommonName != frontProxyClientName {
		t.Errorf("CN = %q, want %q", c.Subject.CommonName, frontProxyClientName)
	}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(t, pki.FrontProxyCACert), KeyUsages: client}); err != nil {
		t.Errorf("front-proxy client does not verify against the front-proxy CA: %v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(t, pki.CACert), KeyUsages: client}); err == nil {
		t.Error("front-proxy client verifies against the cluster CA")
	}
	admin := readCert(t, pki.AdminCert)
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(t, pki.FrontProxyCACert), KeyUsages: client}); err == nil {
		t.Error("admin certificate verifies against the front-proxy CA")
	}
}

// Certificates issued after Start (metrics-server's) come from the cluster CA.
func TestIssuedCertificatesChainToTheClusterCA(t *testing.T) {
	pki, err := generatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certPath, _, err := pki.issueClient("ms-client", "system:metrics-server")
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, certPath)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(t, pki.CACert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if c.Subject.CommonName != "system:metrics-server" {
		t.Errorf("client CN = %q", c.Subject.CommonName)
	}
	certPath, _, err = pki.issueServing("ms", []net.IP{net.ParseIP("10.213.0.1")}, []string{"metrics-server.kube-system.svc"})
	if err != nil {
		t.Fatal(err)
	}
	s := readCert(t, certPath)
	for _, name := range []string{"metrics-server.kube-system.svc", "10.213.0.1"} {
		if _, err := s.Verify(x509.VerifyOptions{Roots: pool(t, pki.CACert), DNSName: name}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
}
