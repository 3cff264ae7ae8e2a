package identity_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// TestANodeDoesNotApproveASomeoneElsesCSRForItsIdentity is the probe's finding:
// a ServiceAccount allowed only to create CSRs asks for a kubelet-serving
// certificate of system:node:<node> with the node's addresses. The node, which
// approves its own serving CSRs (--approve-serving-csr), gets its certificate and
// must leave the other request alone.
func TestANodeDoesNotApproveASomeoneElsesCSRForItsIdentity(t *testing.T) {
	const node = "vk-csr"
	ips := []net.IP{net.ParseIP("10.9.8.7")}
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		IPAddresses: ips, DNSNames: []string{node},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	_, maker := testenv.CSRCreator(t, ns, "csr-maker")
	foreign, err := maker.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "foreign-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), foreign.Name, metav1.DeleteOptions{})
	})

	get, err := identity.ServingCertificate(ctx, identity.ServingConfig{
		NodeName: node, IPs: ips, DNSNames: []string{node}, Client: c, Dir: t.TempDir(),
		AutoApprove: true, WaitTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if cert, err := get(nil); err != nil || cert == nil {
		t.Fatalf("no serving certificate: %v", err)
	}
	// The node is done with its own request; the other one is still pending.
	got, err := c.CertificatesV1().CertificateSigningRequests().Get(ctx, foreign.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved {
			t.Fatalf("the CSR %s created by %s for the node's identity was approved: %s", got.Name, got.Spec.Username, cond.Message)
		}
	}
	if len(got.Status.Certificate) != 0 {
		t.Fatalf("the CSR %s created by %s was issued a certificate", got.Name, got.Spec.Username)
	}
}
