package identity

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// Verdict is what the approver does with a CSR.
type Verdict int

const (
	// Ignore leaves the CSR alone: it is not the install's (another kubelet's,
	// another tool's), or it is decided already.
	Ignore Verdict = iota
	// Approve approves it.
	Approve
	// Deny denies it: one of the install's requesters asked for what the
	// install does not own.
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

// Policy says which requests are the install's and which of those to approve.
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

// Decide says what to do with csr. It reads nothing but csr and the policy.
func (p *Policy) Decide(csr *certificatesv1.CertificateSigningRequest) Decision {
	if Decided(csr) {
		return Decision{Ignore, "decided already"}
	}
	signer := csr.Spec.SignerName
	if signer != certificatesv1.KubeAPIServerClientKubeletSignerName && signer != certificatesv1.KubeletServingSignerName {
		return Decision{Ignore, "signer " + signer + " is not a node's"}
	}
	// Whose request is it? A node of the install renewing its own, or the
	// install's bootstrap account; anyone else's is left alone.
	renewing, isNode := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix)
	switch {
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
	return Decision{Approve, fmt.Sprintf("serving certificate of node %s, one of this install's, for its own addresses", node)}
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
