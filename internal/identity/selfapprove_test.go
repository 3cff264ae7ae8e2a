package identity

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
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

// ownServingCSR is a kubelet-serving CSR for the node's subject and addresses,
// with the usages client-go's certificate manager asks for, as created by
// username.
func ownServingCSR(t *testing.T, name, username string) *certificatesv1.CertificateSigningRequest {
	csr := csrFor(t, "system:node:vk", []string{"system:nodes"}, nodeTemplate.IPAddresses, nodeTemplate.DNSNames)
	csr.Name, csr.Spec.SignerName, csr.Spec.Username = name, certificatesv1.KubeletServingSignerName, username
	csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	return csr
}

// ownRequestOf is what the node records of csr when it creates it.
func ownRequestOf(t *testing.T, csr *certificatesv1.CertificateSigningRequest) OwnRequest {
	t.Helper()
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	return OwnRequest{Name: csr.Name, UID: csr.UID, Username: csr.Spec.Username, Key: req.PublicKey, Want: nodeTemplate}
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
	c := clientsetGivingUIDs()
	a := newSelfApprover(ctx, c, c, nodeTemplate, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}

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
	ref := ownRequestOf(t, own)
	p := nodePolicy(nodeTemplate)
	if d := p.Decide(own, ByNode(ref)); d.Verdict != Approve {
		t.Fatalf("the node's own CSR: %s (%s)", d.Verdict, d.Reason)
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
		if d := p.Decide(csr, ByNode(ref)); d.Verdict == Approve {
			t.Errorf("%s: accepted as the node's own (%s)", name, d.Reason)
		}
	}
}

func TestAutoApproveMatchesOnlyTheNodesSubjectAndAddresses(t *testing.T) {
	ip := []net.IP{net.ParseIP("10.1.2.3")}
	cases := []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		ok   bool
	}{
		{"own", csrFor(t, "system:node:vk", []string{"system:nodes"}, ip, []string{"vk"}), true},
		{"other node", csrFor(t, "system:node:other", []string{"system:nodes"}, ip, []string{"vk"}), false},
		{"extra IP", csrFor(t, "system:node:vk", []string{"system:nodes"}, append(ip, net.ParseIP("8.8.8.8")), []string{"vk"}), false},
		{"extra DNS", csrFor(t, "system:node:vk", []string{"system:nodes"}, ip, []string{"vk", "evil.example"}), false},
		{"other group", csrFor(t, "system:node:vk", []string{"system:masters"}, ip, []string{"vk"}), false},
	}
	p := nodePolicy(nodeTemplate)
	for _, tc := range cases {
		tc.csr.Name, tc.csr.UID, tc.csr.Spec.Username = "own", "uid-1", "kubernetes-admin"
		tc.csr.Spec.SignerName = certificatesv1.KubeletServingSignerName
		tc.csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
		d := p.Decide(tc.csr, ByNode(ownRequestOf(t, tc.csr)))
		if got := d.Verdict == Approve; got != tc.ok {
			t.Errorf("%s: %s (%s), want approved %v", tc.name, d.Verdict, d.Reason, tc.ok)
		}
	}
}

// An approval the API server keeps failing is tried past the back-off's cap,
// until its time is up, and the warning then says what kept failing.
func TestAnApprovalIsTriedUntilItsTimeIsUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := clientsetGivingUIDs()
	gets := 0
	c.PrependReactor("update", "certificatesigningrequests", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "approval" {
			gets++
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	var log bytes.Buffer
	a := newSelfApprover(ctx, c, c, nodeTemplate, slog.New(slog.NewTextHandler(&log, nil)))
	// Capped at the second delay: ExponentialBackoffWithContext would stop there.
	a.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 100, Cap: 2 * time.Millisecond}
	a.timeout = 200 * time.Millisecond
	if _, err := a.clientset().CertificatesV1().CertificateSigningRequests().Create(ctx, ownServingCSR(t, "own", "kubernetes-admin"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wg.Wait()
	if gets < 10 {
		t.Errorf("the approval was tried %d times in %s with delays of 2 ms at most; want it tried until the time was up", gets, a.timeout)
	}
	if !strings.Contains(log.String(), "gave up after 200ms: the API server is away") {
		t.Errorf("the warning does not say what kept failing:\n%s", log.String())
	}
}

// clientsetGivingUIDs is a fake clientset that, as the API server does, gives
// every CSR created a UID.
func clientsetGivingUIDs() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "certificatesigningrequests", func(a core.Action) (bool, runtime.Object, error) {
		obj := a.(core.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		obj.UID = types.UID("uid-" + obj.Name)
		return false, nil, nil
	})
	return c
}
