package identity

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

var nodeTemplate = &x509.CertificateRequest{
	Subject:     pkix.Name{CommonName: "system:node:vk", Organization: []string{"system:nodes"}},
	IPAddresses: []net.IP{net.ParseIP("10.1.2.3")}, DNSNames: []string{"vk"},
}

// servingCSR is a kubelet-serving CSR for the node's subject and addresses, as
// created by username.
func ownServingCSR(t *testing.T, name, username string) *certificatesv1.CertificateSigningRequest {
	csr := csrFor(t, "system:node:vk", []string{"system:nodes"}, nodeTemplate.IPAddresses, nodeTemplate.DNSNames)
	csr.Name, csr.Spec.SignerName, csr.Spec.Username = name, certificatesv1.KubeletServingSignerName, username
	return csr
}

func csrDecided(t *testing.T, c *fake.Clientset, name string) bool {
	csr, err := c.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return Decided(csr)
}

func TestTheNodeApprovesTheCSRItCreatedAndNoOther(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientset()
	// The API server gives every CSR a UID.
	c.PrependReactor("create", "certificatesigningrequests", func(a core.Action) (bool, runtime.Object, error) {
		obj := a.(core.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		obj.UID = types.UID("uid-" + obj.Name)
		return false, nil, nil
	})
	a := &ownCSRApprover{ctx: ctx, client: c, approver: c, want: nodeTemplate, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}}

	// Someone allowed to create CSRs asks for the node's identity first.
	if _, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, ownServingCSR(t, "foreign", "system:serviceaccount:ns:sneaky"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Then the node's certificate manager creates its own, through the approver's clientset.
	if _, err := a.clientset().CertificatesV1().CertificateSigningRequests().Create(ctx, ownServingCSR(t, "own", "kubernetes-admin"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wg.Wait()
	if !csrDecided(t, c, "own") {
		t.Error("the node's own CSR was not approved")
	}
	if csrDecided(t, c, "foreign") {
		t.Error("a CSR someone else created for the node's identity was approved")
	}
	for _, act := range c.Actions() {
		if act.GetVerb() == "list" || act.GetVerb() == "watch" {
			t.Errorf("the approver %ss CSRs; it should act only on the node's own", act.GetVerb())
		}
	}
}

func TestACSRReplacedUnderTheNodesNameIsNotApproved(t *testing.T) {
	own := ownServingCSR(t, "own", "system:node:vk")
	own.UID = "uid-1"
	req, err := parseOwnRequest(own)
	if err != nil {
		t.Fatal(err)
	}
	ref := ownRequest{name: "own", uid: "uid-1", username: "system:node:vk", key: req.PublicKey}
	if err := checkOwn(own, ref, nodeTemplate); err != nil {
		t.Fatalf("the node's own CSR: %v", err)
	}
	other := ownServingCSR(t, "own", "system:node:vk") // another key
	other.UID = "uid-1"
	cases := map[string]*certificatesv1.CertificateSigningRequest{
		"deleted and created again (new UID)": func() *certificatesv1.CertificateSigningRequest { c := own.DeepCopy(); c.UID = "uid-2"; return c }(),
		"created by someone else": func() *certificatesv1.CertificateSigningRequest {
			c := own.DeepCopy()
			c.Spec.Username = "mallory"
			return c
		}(),
		"another key": other,
		"another signer": func() *certificatesv1.CertificateSigningRequest {
			c := own.DeepCopy()
			c.Spec.SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
			return c
		}(),
	}
	for name, csr := range cases {
		if err := checkOwn(csr, ref, nodeTemplate); err == nil {
			t.Errorf("%s: accepted as the node's own", name)
		}
	}
}
