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
			d := p.Decide(tc.csr)
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
	if d := p.Decide(csr); d.Verdict != Deny {
		t.Errorf("Decide: %s (%s), want Deny", d.Verdict, d.Reason)
	}
}

func TestWithoutServingAddressesNoServingCertificateNamesOne(t *testing.T) {
	p := testPolicy()
	p.ServingIPs = nil
	if d := p.Decide(servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"}, "10.244.3.4")); d.Verdict != Deny {
		t.Errorf("Decide: %s (%s), want Deny", d.Verdict, d.Reason)
	}
	if d := p.Decide(servingCSR(t, "system:node:vk-a", "vk-a", []string{"vk-a"})); d.Verdict != Approve {
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
