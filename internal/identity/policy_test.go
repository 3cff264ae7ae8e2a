package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const bootstrapSA = "system:serviceaccount:vkubelet-system:vkubelet"

func testPolicy() Policy {
	return Policy{
		Names: []string{"vk-a", "vk-b"}, Prefixes: []string{"burst-"},
		Requesters: []string{bootstrapSA}, RequesterGroups: []string{"system:bootstrappers:vkubelet"},
		ServingIPs: CIDRs{netip.MustParsePrefix("10.244.0.0/16")},
	}
}

// request is a PEM CSR for template, signed by a fresh key.
func request(t *testing.T, template *x509.CertificateRequest) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, template, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func nodeSubject(name string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
}

func clientCSR(t *testing.T, user, node string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, Username: user,
		Usages:  []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		Request: request(t, &x509.CertificateRequest{Subject: nodeSubject(node)}),
	}}
}

func servingCSR(t *testing.T, user, node string, dns []string, ips ...string) *certificatesv1.CertificateSigningRequest {
	tpl := &x509.CertificateRequest{Subject: nodeSubject(node), DNSNames: dns}
	for _, ip := range ips {
		tpl.IPAddresses = append(tpl.IPAddresses, net.ParseIP(ip))
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		SignerName: certificatesv1.KubeletServingSignerName, Username: user,
		Usages:  []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		Request: request(t, tpl),
	}}
}

func TestTheInstallsNodesAreApprovedAndNoOthers(t *testing.T) {
	withGroup := func(c *certificatesv1.CertificateSigningRequest, groups ...string) *certificatesv1.CertificateSigningRequest {
		c.Spec.Groups = groups
		return c
	}
	withUsages := func(c *certificatesv1.CertificateSigningRequest, u ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
		c.Spec.Usages = u
		return c
	}
	withSigner := func(c *certificatesv1.CertificateSigningRequest, s string) *certificatesv1.CertificateSigningRequest {
		c.Spec.SignerName = s
		return c
	}
	approved := func(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		return c
	}
	custom := func(user, signer string, tpl *x509.CertificateRequest, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: signer, Username: user, Usages: usages, Request: request(t, tpl)}}
	}
	u, _ := url.Parse("spiffe://cluster/ns/x")
	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		want Verdict
		why  string // a part of the reason
	}{
		{"the bootstrap account asks for an owned node", clientCSR(t, bootstrapSA, "vk-a"), Approve, "vk-a"},
		{"a bootstrap token of the install's group asks for an owned node",
			withGroup(clientCSR(t, "system:bootstrap:abcdef", "vk-b"), "system:bootstrappers", "system:bootstrappers:vkubelet"), Approve, "vk-b"},
		{"a name under an owned prefix", clientCSR(t, bootstrapSA, "burst-7"), Approve, "burst-7"},
		{"an owned node renews its own identity", clientCSR(t, "system:node:vk-a", "vk-a"), Approve, ""},
		{"the bootstrap account asks for a node it does not own", clientCSR(t, bootstrapSA, "victim-node"), Deny, `"victim-node" is not one of this install's nodes`},
		{"the bare prefix is not a name under it", clientCSR(t, bootstrapSA, "burst-"), Deny, "not one of this install's nodes"},
		{"an owned node asks for another owned node", clientCSR(t, "system:node:vk-a", "vk-b"), Deny, `node "vk-a" asks for a certificate of node "vk-b"`},
		{"a real kubelet renewing is not the install's business", clientCSR(t, "system:node:worker-1", "worker-1"), Ignore, "not by this install"},
		{"someone else's request is left to others", clientCSR(t, "system:serviceaccount:other:sa", "vk-a"), Ignore, "not by this install"},
		{"another signer is left to others", withSigner(clientCSR(t, bootstrapSA, "vk-a"), certificatesv1.KubeAPIServerClientSignerName), Ignore, "not a node's"},
		{"a decided request is left alone", approved(clientCSR(t, bootstrapSA, "victim")), Ignore, "decided"},
		{"a user who is not a node", custom(bootstrapSA, certificatesv1.KubeAPIServerClientKubeletSignerName,
			&x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}},
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), Deny, "not system:node:<name>"},
		{"a node in system:masters too", custom(bootstrapSA, certificatesv1.KubeAPIServerClientKubeletSignerName,
			&x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:vk-a", Organization: []string{"system:nodes", "system:masters"}}},
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), Deny, "organizations"},
		{"a client certificate with an address", custom(bootstrapSA, certificatesv1.KubeAPIServerClientKubeletSignerName,
			&x509.CertificateRequest{Subject: nodeSubject("vk-a"), IPAddresses: []net.IP{net.ParseIP("10.244.1.1")}},
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), Deny, "no DNS name or IP"},
		{"a client certificate that would also serve", withUsages(clientCSR(t, bootstrapSA, "vk-a"),
			certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth), Deny, "key usage"},
		{"a client certificate without client auth", withUsages(clientCSR(t, bootstrapSA, "vk-a"), certificatesv1.UsageDigitalSignature), Deny, "lack"},
		{"a URI in the request", custom(bootstrapSA, certificatesv1.KubeletServingSignerName,
			&x509.CertificateRequest{Subject: nodeSubject("vk-a"), URIs: []*url.URL{u}},
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth), Deny, "URI"},
		{"a request that is not PEM", func() *certificatesv1.CertificateSigningRequest {
			c := clientCSR(t, bootstrapSA, "vk-a")
			c.Spec.Request = []byte("garbage")
			return c
		}(), Deny, "no PEM"},

		{"a node's serving certificate for its name and address", servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}, "10.244.3.4"), Approve, "serving"},
		{"a serving certificate for another node's address", servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}, "10.9.9.9"), Deny, "10.9.9.9 is not one of node vk-a's addresses"},
		{"a serving certificate for another DNS name", servingCSR(t, "system:node:vk-a", "vk-a", []string{"kubernetes.default.svc"}, "10.244.3.4"), Deny, "DNS name"},
		{"a serving certificate for another node", servingCSR(t, bootstrapSA, "victim-node", []string{"victim-node"}, "10.244.3.4"), Deny, "not one of this install's nodes"},
		{"a serving certificate naming nothing", servingCSR(t, "system:node:vk-a", "vk-a", nil), Deny, "at least one"},
		{"a serving certificate that would also authenticate", withUsages(servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}, "10.244.3.4"),
			certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth), Deny, "key usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			d := p.Decide(tc.csr, ByApprover)
			if d.Verdict != tc.want || !strings.Contains(d.Reason, tc.why) {
				t.Errorf("Decide: %s (%s), want %s with a reason saying %q", d.Verdict, d.Reason, tc.want, tc.why)
			}
		})
	}
}

// A request whose signature is not its key's is a forgery of someone else's
// request, and is denied.
func TestARequestNotSignedByItsKeyIsDenied(t *testing.T) {
	csr := clientCSR(t, bootstrapSA, "vk-a")
	block, _ := pem.Decode(csr.Spec.Request)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	csr.Spec.Request = pem.EncodeToMemory(block)
	p := testPolicy()
	if d := p.Decide(csr, ByApprover); d.Verdict != Deny {
		t.Errorf("Decide: %s (%s), want Deny", d.Verdict, d.Reason)
	}
}

func TestWithoutServingAddressesNoServingCertificateNamesOne(t *testing.T) {
	p := testPolicy()
	p.ServingIPs = nil
	if d := p.Decide(servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}, "10.244.3.4"), ByApprover); d.Verdict != Deny {
		t.Errorf("Decide: %s (%s), want Deny", d.Verdict, d.Reason)
	}
	if d := p.Decide(servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}), ByApprover); d.Verdict != Approve {
		t.Errorf("a serving certificate of the node's name alone: %s (%s), want Approve", d.Verdict, d.Reason)
	}
}

func TestAPolicyThatWouldOwnTooMuchIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Policy)
		why    string
	}{
		{"no names", func(p *Policy) { p.Names, p.Prefixes = nil, nil }, "no node names"},
		{"an empty prefix", func(p *Policy) { p.Prefixes = []string{""} }, "every node name"},
		{"no requester", func(p *Policy) { p.Requesters, p.RequesterGroups = nil, nil }, "no requester"},
		{"every authenticated user", func(p *Policy) { p.RequesterGroups = []string{"system:authenticated"} }, "system:authenticated"},
		{"a namespace's service accounts", func(p *Policy) { p.RequesterGroups = []string{"system:serviceaccounts:kube-system"} }, "kube-system"},
		{"a node as requester", func(p *Policy) { p.Requesters = []string{"system:node:vk-a"} }, "is a node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			tc.change(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Validate: %v, want an error saying %q", err, tc.why)
			}
		})
	}
	p := testPolicy()
	if err := p.Validate(); err != nil {
		t.Errorf("the test policy: %v", err)
	}
}

func TestCIDRsAreReadFromPrefixesAndAddresses(t *testing.T) {
	got, err := ParseCIDRs("10.244.0.0/16", "10.0.0.7", "fd00::1", "10.1.2.3/8")
	if err != nil {
		t.Fatal(err)
	}
	want := CIDRs{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.0.0.7/32"),
		netip.MustParsePrefix("fd00::1/128"), netip.MustParsePrefix("10.0.0.0/8")}
	if !slices.Equal(got, want) {
		t.Errorf("ParseCIDRs: %v, want %v", got, want)
	}
	if _, err := ParseCIDRs("10.0.0.300"); err == nil {
		t.Error("a bad address was read")
	}
}

// TestOneDecisionForTheApproverAndTheNode asks the one decision as both its
// callers do: the approver (ByApprover, testPolicy, which owns vk-a and vk-b
// and serving addresses in 10.244.0.0/16) and node vk-a approving the serving
// CSR it created, for its name and 10.244.3.4 (ByNode, with the CSR as the node
// created it; after changes it later, as someone replacing it would).
func TestOneDecisionForTheApproverAndTheNode(t *testing.T) {
	want := &x509.CertificateRequest{Subject: nodeSubject("vk-a"), DNSNames: []string{"vk-a"}, IPAddresses: []net.IP{net.ParseIP("10.244.3.4")}}
	asked := func(change func(*x509.CertificateRequest)) *x509.CertificateRequest {
		tpl := *want
		if change != nil {
			change(&tpl)
		}
		return &tpl
	}
	serving := func(user string, tpl *x509.CertificateRequest, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
		if usages == nil {
			usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
		}
		return &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "csr-1", UID: "uid-1"},
			Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: certificatesv1.KubeletServingSignerName,
				Username: user, Usages: usages, Request: request(t, tpl)},
		}
	}
	const self = "system:node:vk-a"
	badlySigned := serving(self, want)
	block, _ := pem.Decode(badlySigned.Spec.Request)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	badlySigned.Spec.Request = pem.EncodeToMemory(block)
	notACSR := serving(self, want)
	block, _ = pem.Decode(notACSR.Spec.Request)
	block.Type = "CERTIFICATE"
	notACSR.Spec.Request = pem.EncodeToMemory(block)
	decided := serving(self, want)
	decided.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue}}
	client := clientCSR(t, self, "vk-a")
	client.Name, client.UID = "csr-1", "uid-1"
	u, _ := url.Parse("spiffe://cluster/ns/x")

	for _, tc := range []struct {
		name           string
		csr            *certificatesv1.CertificateSigningRequest
		after          func(*certificatesv1.CertificateSigningRequest) // after the node created it
		approver, node Verdict
		why            string // a part of both reasons, if any
	}{
		{name: "the node's serving certificate for its name and address", csr: serving(self, want), approver: Approve, node: Approve},
		{name: "created with a credential that is not a node's (the node's kubeconfig)", csr: serving("kubernetes-admin", want), approver: Ignore, node: Approve},
		{name: "a request whose signature does not verify against its key", csr: badlySigned, approver: Deny, node: Deny, why: "not signed by its key"},
		{name: "a PEM block that is not a certificate request", csr: notACSR, approver: Deny, node: Deny, why: "no PEM CERTIFICATE REQUEST"},
		{name: "decided already", csr: decided, approver: Ignore, node: Ignore, why: "decided already"},
		{name: "the node's client certificate", csr: client, approver: Approve, node: Ignore},
		{name: "deleted and created again under the node's CSR name", csr: serving(self, want), approver: Approve, node: Ignore,
			after: func(c *certificatesv1.CertificateSigningRequest) { c.UID = "uid-2" }},
		{name: "another requester's CSR for the node's identity", csr: serving(self, want), approver: Ignore, node: Ignore,
			after: func(c *certificatesv1.CertificateSigningRequest) {
				c.Name, c.UID, c.Spec.Username = "foreign", "uid-9", "system:serviceaccount:ns:sneaky"
			}},
		{name: "another key than the node's", csr: serving(self, want), approver: Approve, node: Deny,
			after: func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = request(t, want) }},
		{name: "an address that is not the node's", csr: serving(self, asked(func(r *x509.CertificateRequest) {
			r.IPAddresses = append(r.IPAddresses, net.ParseIP("8.8.8.8"))
		})), approver: Deny, node: Deny, why: "8.8.8.8 is not one of node vk-a's addresses"},
		{name: "an address of the install's the node did not ask for", csr: serving(self, asked(func(r *x509.CertificateRequest) {
			r.IPAddresses = []net.IP{net.ParseIP("10.244.9.9")}
		})), approver: Approve, node: Deny},
		{name: "fewer addresses than the node asked for", csr: serving(self, asked(func(r *x509.CertificateRequest) { r.IPAddresses = nil })),
			approver: Approve, node: Deny},
		{name: "another DNS name", csr: serving(self, asked(func(r *x509.CertificateRequest) { r.DNSNames = []string{"vk-a", "evil.example"} })),
			approver: Deny, node: Deny, why: "DNS name"},
		{name: "a URI", csr: serving(self, asked(func(r *x509.CertificateRequest) { r.URIs = []*url.URL{u} })),
			approver: Deny, node: Deny, why: "URI"},
		{name: "a node in system:masters too", csr: serving(self, asked(func(r *x509.CertificateRequest) {
			r.Subject.Organization = []string{"system:nodes", "system:masters"}
		})), approver: Deny, node: Deny, why: "organizations"},
		{name: "an organizational unit in the subject", csr: serving(self, asked(func(r *x509.CertificateRequest) {
			r.Subject.OrganizationalUnit = []string{"ops"}
		})), approver: Deny, node: Deny, why: "more than a node's common name"},
		{name: "a serving certificate that would also authenticate", csr: serving(self, want,
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth),
			approver: Deny, node: Deny, why: "key usage"},
		{name: "another node's certificate", csr: serving(self, asked(func(r *x509.CertificateRequest) {
			r.Subject = nodeSubject("vk-b")
			r.DNSNames = []string{"vk-b"}
		})), approver: Deny, node: Deny},
		{name: "asked as another node", csr: serving("system:node:vk-b", want), approver: Deny, node: Deny,
			why: `node "vk-b" asks for a certificate of node "vk-a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := OwnRequest{Name: tc.csr.Name, UID: tc.csr.UID, Username: tc.csr.Spec.Username, Want: want}
			if block, _ := pem.Decode(tc.csr.Spec.Request); block != nil {
				if req, err := x509.ParseCertificateRequest(block.Bytes); err == nil {
					own.Key = req.PublicKey
				}
			}
			if tc.after != nil {
				tc.after(tc.csr)
			}
			p, n := testPolicy(), nodePolicy(want)
			for _, got := range []struct {
				who  string
				d    Decision
				want Verdict
			}{
				{"the approver", p.Decide(tc.csr, ByApprover), tc.approver},
				{"the node", n.Decide(tc.csr, ByNode(own)), tc.node},
			} {
				if got.d.Verdict != got.want || got.want != Ignore && !strings.Contains(got.d.Reason, tc.why) {
					t.Errorf("%s: %s (%s), want %s with a reason saying %q", got.who, got.d.Verdict, got.d.Reason, got.want, tc.why)
				}
			}
		})
	}
}
