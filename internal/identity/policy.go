package identity

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Verdict is what to do with a CSR. The approver carries out all three; a node
// deciding on its own request approves it or leaves it alone, and denies
// nothing.
type Verdict int

const (
	// Ignore leaves the CSR alone: it is not the asker's (another kubelet's,
	// another tool's; for a node, any but the object it created), or it is
	// decided already.
	Ignore Verdict = iota
	// Approve approves it.
	Approve
	// Deny denies it: the asker's requester asked for what it does not own.
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Approve:
		return "Approve"
	case Deny:
		return "Deny"
	default:
		return "Ignore"
	}
}

// Decision is a verdict and why, in words for the CSR's condition and Event.
type Decision struct {
	Verdict Verdict
	Reason  string
}

// IPSet says which addresses a node's serving certificate may name.
type IPSet interface {
	// Contains reports whether ip may be an address of node's serving certificate.
	Contains(node string, ip net.IP) bool
}

// CIDRs is an IPSet of fixed prefixes, the same for every node.
type CIDRs []netip.Prefix

// Contains reports whether ip is in one of the prefixes.
func (c CIDRs) Contains(_ string, ip net.IP) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range c {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseCIDRs reads each of ss as a CIDR, or as an address standing for itself
// alone.
func ParseCIDRs(ss ...string) (CIDRs, error) {
	var out CIDRs
	for _, s := range ss {
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, err
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// AnyOf is an IPSet holding the addresses any of its sets holds.
type AnyOf []IPSet

// Contains reports whether one of the sets contains ip.
func (s AnyOf) Contains(node string, ip net.IP) bool {
	for _, set := range s {
		if set != nil && set.Contains(node, ip) {
			return true
		}
	}
	return false
}

// Policy says which requests are the install's and which of those to approve:
// the approver's, from its flags, or a node's own (nodePolicy).
type Policy struct {
	// Names are the node names the install owns, and Prefixes the prefixes of
	// the names it owns (a NodeSet template's names, say): a request for any
	// other node is denied.
	Names    []string
	Prefixes []string
	// Requesters and RequesterGroups are the users and groups that ask for a
	// node's first certificate: the install's bootstrap account (a
	// ServiceAccount's username, or the group of its bootstrap tokens). A node
	// the install owns may renew its own certificates as itself.
	Requesters      []string
	RequesterGroups []string
	// ServingIPs are the addresses a serving certificate may name; nil: none,
	// so serving requests with an address are denied.
	ServingIPs IPSet
}

// Owns reports whether name is one of the install's nodes.
func (p *Policy) Owns(name string) bool {
	if name == "" {
		return false
	}
	if slices.Contains(p.Names, name) {
		return true
	}
	for _, prefix := range p.Prefixes {
		if prefix != "" && strings.HasPrefix(name, prefix) && len(name) > len(prefix) {
			return true
		}
	}
	return false
}

const nodeUserPrefix = "system:node:"

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
)

// Asker is who asks for a decision: the approver, for any node its Policy owns,
// or a node, for the one request it created. The rules are the same for both
// but where they say otherwise:
//
//   - whose request it is: the approver's are those of the Policy's requesters
//     and of its nodes renewing their own certificates (anyone else's it
//     ignores); a node's is the very object it created — its name, UID and
//     spec.username as the API server answered the node's Create — and no
//     other;
//   - which signers: both node signers for the approver; kubelet-serving alone
//     for a node, whose client certificate is never its own to approve;
//   - the key: a node's request carries the public key of the request it sent;
//   - the names and addresses: a node's request asks for exactly those the
//     node asked for, no fewer, in the same order.
type Asker struct {
	// own is the request a node created, when the node asks; nil when the
	// approver asks.
	own *OwnRequest
}

// ByApprover is the approver, deciding on the requests of any of its Policy's
// nodes.
var ByApprover = Asker{}

// ByNode is a node deciding on own, the request it created, and on no other.
func ByNode(own OwnRequest) Asker { return Asker{own: &own} }

// OwnRequest is a CSR a node created: what the API server answered to the
// node's own Create, which no one else can forge, and what the node asked for.
type OwnRequest struct {
	Name     string
	UID      types.UID
	Username string // spec.username: the identity the API server saw create it
	Key      crypto.PublicKey
	// Want is the node's certificate request: the subject, DNS names and IP
	// addresses it asked for.
	Want *x509.CertificateRequest
}

// notThis says why csr is not the object o describes; "" if it is.
func (o *OwnRequest) notThis(csr *certificatesv1.CertificateSigningRequest) string {
	switch {
	case csr.Name != o.Name || csr.UID != o.UID:
		return fmt.Sprintf("CSR %s (UID %s) is not the one the node created (%s, UID %s)", csr.Name, csr.UID, o.Name, o.UID)
	case csr.Spec.Username != o.Username:
		return fmt.Sprintf("CSR %s was created by %q, not by the node's identity %q", csr.Name, csr.Spec.Username, o.Username)
	}
	return ""
}

// signers are the signers whose requests the asker decides on.
func (a Asker) signers() []string {
	if a.own != nil {
		return []string{certificatesv1.KubeletServingSignerName}
	}
	return []string{certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName}
}

// Decide says what to do with csr when by asks. It reads nothing but csr, the
// policy and by. Every rule of which node CSR to approve is here, once, for the
// approver and for a node approving its own; where the two differ, by says how
// (Asker).
func (p *Policy) Decide(csr *certificatesv1.CertificateSigningRequest, by Asker) Decision {
	if Decided(csr) {
		return Decision{Ignore, "decided already"}
	}
	signer := csr.Spec.SignerName
	if !slices.Contains(by.signers(), signer) {
		return Decision{Ignore, "signer " + signer + " is not a node's"}
	}
	// Whose request is it? The approver's: the install's bootstrap account's,
	// or one of the install's nodes renewing its own; a node's: the object it
	// created. Anyone else's is left alone. renewing is the node that asks, if
	// a node asks: it may ask only for itself.
	renewing, isNode := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix)
	own := by.own
	switch {
	case own != nil:
		if why := own.notThis(csr); why != "" {
			return Decision{Ignore, why}
		}
		if !isNode {
			renewing = ""
		}
	case isNode && p.Owns(renewing):
	case p.isRequester(csr.Spec.Username, csr.Spec.Groups):
		renewing = ""
	default:
		return Decision{Ignore, fmt.Sprintf("requested by %q, not by this install", csr.Spec.Username)}
	}

	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return Decision{Deny, err.Error()}
	}
	if own != nil {
		if k, ok := req.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(own.Key) {
			return Decision{Deny, fmt.Sprintf("CSR %s carries another public key than the node's", csr.Name)}
		}
	}
	node, ok := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix)
	switch {
	case !ok || node == "":
		return Decision{Deny, fmt.Sprintf("the subject's common name %q is not system:node:<name>", req.Subject.CommonName)}
	case !slices.Equal(req.Subject.Organization, []string{"system:nodes"}):
		return Decision{Deny, fmt.Sprintf("the subject's organizations %q are not [system:nodes]", req.Subject.Organization)}
	case len(req.Subject.OrganizationalUnit)+len(req.Subject.Country)+len(req.Subject.Locality)+len(req.Subject.Province)+
		len(req.Subject.StreetAddress)+len(req.Subject.PostalCode) > 0 || req.Subject.SerialNumber != "":
		return Decision{Deny, "the subject names more than a node's common name and organization"}
	case !p.Owns(node):
		return Decision{Deny, fmt.Sprintf("node %q is not one of this install's nodes", node)}
	case renewing != "" && renewing != node:
		return Decision{Deny, fmt.Sprintf("node %q asks for a certificate of node %q", renewing, node)}
	case len(req.EmailAddresses) > 0 || len(req.URIs) > 0:
		return Decision{Deny, "a node's certificate names no e-mail address or URI"}
	}

	if signer == certificatesv1.KubeAPIServerClientKubeletSignerName {
		if len(req.DNSNames) > 0 || len(req.IPAddresses) > 0 {
			return Decision{Deny, "a node's client certificate names no DNS name or IP address"}
		}
		if why := checkUsages(csr.Spec.Usages, certificatesv1.UsageClientAuth, clientUsages); why != "" {
			return Decision{Deny, why}
		}
		return Decision{Approve, fmt.Sprintf("client certificate of node %s, one of this install's", node)}
	}

	if why := checkUsages(csr.Spec.Usages, certificatesv1.UsageServerAuth, servingUsages); why != "" {
		return Decision{Deny, why}
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return Decision{Deny, "a serving certificate names at least one DNS name or IP address"}
	}
	for _, dns := range req.DNSNames {
		if dns != node {
			return Decision{Deny, fmt.Sprintf("DNS name %q is not the node's name %q", dns, node)}
		}
	}
	for _, ip := range req.IPAddresses {
		if p.ServingIPs == nil || !p.ServingIPs.Contains(node, ip) {
			return Decision{Deny, fmt.Sprintf("IP address %s is not one of node %s's addresses", ip, node)}
		}
	}
	if own != nil && !sameAddresses(req, own.Want) {
		return Decision{Deny, fmt.Sprintf("CSR %s asks for other names or addresses than the node asked for", csr.Name)}
	}
	return Decision{Approve, fmt.Sprintf("serving certificate of node %s, one of this install's, for its own addresses", node)}
}

// sameAddresses reports whether req names the DNS names and IP addresses of
// want, in the same order, and no others.
func sameAddresses(req, want *x509.CertificateRequest) bool {
	return slices.Equal(req.DNSNames, want.DNSNames) &&
		slices.EqualFunc(req.IPAddresses, want.IPAddresses, func(a, b net.IP) bool { return a.Equal(b) })
}

func (p *Policy) isRequester(user string, groups []string) bool {
	if user != "" && slices.Contains(p.Requesters, user) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(p.RequesterGroups, g) {
			return true
		}
	}
	return false
}

// checkUsages says what is wrong with usages for a certificate that needs
// required and may carry allowed; "" if nothing.
func checkUsages(usages []certificatesv1.KeyUsage, required certificatesv1.KeyUsage, allowed []certificatesv1.KeyUsage) string {
	if !slices.Contains(usages, required) {
		return fmt.Sprintf("key usages %q lack %q", usages, required)
	}
	for _, u := range usages {
		if !slices.Contains(allowed, u) {
			return fmt.Sprintf("key usage %q is not one of a node certificate's %q", u, allowed)
		}
	}
	return ""
}

// parseRequest is the one parser of a CSR's spec.request: a PEM CERTIFICATE
// REQUEST whose signature verifies against its own public key. A request signed
// by another key is a copy of someone else's request with its subject or
// addresses changed, and its key's holder asked for nothing.
func parseRequest(b []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request holds no PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request is not signed by its key: %w", err)
	}
	return req, nil
}

// Decided reports whether csr was approved or denied already.
func Decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// broadGroups are groups whose members are far more than an install's
// bootstrap account; a policy naming one would approve nodes for all of them.
var broadGroups = []string{"system:authenticated", "system:unauthenticated", "system:serviceaccounts", "system:nodes", "system:bootstrappers", "system:masters"}

// Validate says what makes p unsafe or useless.
func (p *Policy) Validate() error {
	if len(p.Names) == 0 && len(p.Prefixes) == 0 {
		return fmt.Errorf("csr approver: no node names or prefixes: it would approve nothing")
	}
	for _, prefix := range p.Prefixes {
		if prefix == "" {
			return fmt.Errorf("csr approver: an empty prefix would own every node name")
		}
	}
	if len(p.Requesters) == 0 && len(p.RequesterGroups) == 0 {
		return fmt.Errorf("csr approver: no requester: no node could obtain its first certificate")
	}
	for _, g := range p.RequesterGroups {
		if slices.Contains(broadGroups, g) || strings.HasPrefix(g, "system:serviceaccounts:") {
			return fmt.Errorf("csr approver: requester group %q holds more than an install's bootstrap account", g)
		}
	}
	for _, u := range p.Requesters {
		if strings.HasPrefix(u, nodeUserPrefix) {
			return fmt.Errorf("csr approver: requester %q is a node; nodes renew their own certificates without being named", u)
		}
	}
	return nil
}
