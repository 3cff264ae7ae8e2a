package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/identity"
)

// CSRCreator makes a ServiceAccount ns/name allowed to create and read CSRs and
// nothing else (a node install's bootstrap account), and returns its username
// and a client authenticating with a token of it. Its ClusterRole and binding
// are removed when the test ends.
func CSRCreator(t testing.TB, ns, name string) (string, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	c := Client(t)
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
			Verbs: []string{"create", "get", "list", "watch"}}},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	return "system:serviceaccount:" + ns + ":" + name, TokenClient(t, ns, name)
}

// TokenConfig is a configuration of the package's control plane that
// authenticates with a new token of the ServiceAccount ns/name, as whoever holds
// that account's pod token does.
func TokenConfig(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	tok, err := Client(t).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(ControlPlane(t).RESTConfig)
	cfg.BearerToken = tok.Status.Token
	return cfg
}

// TokenClient is a client of TokenConfig.
func TokenClient(t testing.TB, ns, name string) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(TokenConfig(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// User is who client authenticates as, as the API server sees it.
func User(t testing.TB, client kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return review.Status.UserInfo
}

// AskForNodeCertificate creates, with client, a CSR for a certificate of node
// from signer (a node client certificate, or a serving one naming the node and
// ips), as a kubelet or a thief would.
func AskForNodeCertificate(t testing.TB, client kubernetes.Interface, signer, node string, ips ...string) string {
	t.Helper()
	name, err := TryAskForNodeCertificate(t, client, signer, node, ips...)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TryAskForNodeCertificate is AskForNodeCertificate for a request the API
// server may refuse: its error is returned.
func TryAskForNodeCertificate(t testing.TB, client kubernetes.Interface, signer, node string, ips ...string) (string, error) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if signer == certificatesv1.KubeletServingSignerName {
		usages[1] = certificatesv1.UsageServerAuth
		tpl.DNSNames = []string{node}
		for _, ip := range ips {
			tpl.IPAddresses = append(tpl.IPAddresses, net.ParseIP(ip))
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: signer, Usages: usages,
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a CSR for %s (%s): %w", node, signer, err)
	}
	return csr.Name, nil
}

// CSROutcome is what became of the CSR name, as client reads it: "issued"
// (approved and signed), "approved" (not signed yet), "denied" or "pending".
func CSROutcome(t testing.TB, client kubernetes.Interface, name string) string {
	t.Helper()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := "pending"
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return "denied"
		case certificatesv1.CertificateApproved:
			out = "approved"
		}
	}
	if out == "approved" && len(csr.Status.Certificate) > 0 {
		return "issued"
	}
	return out
}

// CheckCannotBecomeAnotherNode checks what a thief holding a node install's
// bootstrap credential (stolen) can obtain of another node, victim at victimIP:
// a client identity and a serving certificate it asks for are refused by the
// API server or not approved (denied, or still pending after a minute), and it
// cannot approve them itself.
func CheckCannotBecomeAnotherNode(t testing.TB, stolen kubernetes.Interface, victim, victimIP string) {
	t.Helper()
	asked := map[string]string{}
	for signer, what := range map[string]string{
		certificatesv1.KubeAPIServerClientKubeletSignerName: "client identity",
		certificatesv1.KubeletServingSignerName:             "serving certificate",
	} {
		name, err := TryAskForNodeCertificate(t, stolen, signer, victim, victimIP)
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			t.Logf("the API server refused the %s of %s asked for with the stolen credential: %v", what, victim, err)
		case err != nil:
			t.Fatal(err)
		default:
			asked[name] = what
		}
	}
	for name, what := range asked {
		csr, err := stolen.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: "True", Reason: "Thief"})
		if _, err := stolen.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), name, csr, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the stolen credential approving the %s of %s: %v, want Forbidden", what, victim, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		settled := true
		for name, what := range asked {
			switch got := CSROutcome(t, stolen, name); got {
			case "issued", "approved":
				t.Fatalf("the %s of %s asked for with the stolen credential was %s", what, victim, got)
			case "pending":
				settled = false
			}
		}
		if settled || time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// NodeBootstrap readies the test's control plane for node to join as a kubelet
// does: it writes a bootstrap kubeconfig (a bootstrap token valid for an hour)
// and returns its path, and runs, for the test's life, the approver of the
// node's client and serving CSRs (serving addresses on 127.0.0.1). The bootstrap
// token may create CSRs, not have them approved.
func NodeBootstrap(t testing.TB, node string) string {
	t.Helper()
	cp := ControlPlane(t)
	bootstrap, err := cp.NodeBootstrapKubeconfig(context.Background(), filepath.Join(t.TempDir(), "bootstrap.kubeconfig"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.RunNodeApprover(t.Context(), []string{node}, identity.CIDRs{netip.MustParsePrefix("127.0.0.1/32")}, nil); err != nil {
		t.Fatal(err)
	}
	return bootstrap
}
