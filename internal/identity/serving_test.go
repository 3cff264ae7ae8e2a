package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

func TestSelfSignedCoversTheNodeAddresses(t *testing.T) {
	get, err := ServingCertificate(context.Background(), ServingConfig{SelfSigned: true, NodeName: "vk", IPs: []net.IP{net.ParseIP("10.1.2.3")}, DNSNames: []string{"vk"}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("10.1.2.3"); err != nil {
		t.Fatal(err)
	}
	// A client that trusts the certificate itself completes a handshake with it
	// for the node's name: the key matches and the usages allow serving.
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "vk", Roots: roots}); err != nil {
		t.Fatal(err)
	}
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	go func() { _ = tls.Server(server, &tls.Config{GetCertificate: get}).Handshake() }()
	if err := tls.Client(client, &tls.Config{RootCAs: roots, ServerName: "vk"}).Handshake(); err != nil {
		t.Fatalf("handshake with the self-signed certificate: %v", err)
	}
}

// csrFor builds a CSR object asking for subject and addresses.
func csrFor(t *testing.T, cn string, org []string, ips []net.IP, dns []string) *certificatesv1.CertificateSigningRequest {
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := keyutil.ParsePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: org}, IPAddresses: ips, DNSNames: dns}, signer)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request: pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateRequestBlockType, Bytes: der}),
	}}
}
