package identity

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certificatesclient "k8s.io/client-go/kubernetes/typed/certificates/v1"
)

// selfApprover approves the node's own kubelet-serving CSRs and nothing else.
// It sees the node's CSRs as client-go's certificate manager creates them,
// through the clientset it hands the manager, so it never lists or polls CSRs:
// it acts once per certificate the node asks for (the first, then each renewal).
//
// Matching a CSR by its subject and addresses alone is not enough: anyone
// allowed to create CSRs can ask for system:node:<node> with the node's
// addresses, and a node that approved every such request handed out its serving
// identity (found by a probe). Whether to approve is the approver's decision
// (Policy.Decide), asked by the node (ByNode) with the request it created: the
// very object (name and UID), its public key, the identity it was created as,
// and exactly the node's subject and addresses.
type selfApprover struct {
	ctx context.Context
	// client creates the node's CSRs; approver reads and approves them (the same
	// clientset unless the node's own identity may not approve).
	client, approver kubernetes.Interface
	// want is the node's certificate request, policy the node's own names
	// and addresses (nodePolicy).
	want   *x509.CertificateRequest
	policy Policy
	log    *slog.Logger
	// backoff paces the retries of one approval (the API server may be away).
	backoff wait.Backoff
	timeout time.Duration // how long one approval is tried
	wg      sync.WaitGroup
}

func newSelfApprover(ctx context.Context, client, approver kubernetes.Interface, want *x509.CertificateRequest, log *slog.Logger) *selfApprover {
	return &selfApprover{ctx: ctx, client: client, approver: approver, want: want, policy: nodePolicy(want), log: log, backoff: defaultApprovalBackoff, timeout: defaultApprovalTimeout}
}

// nodePolicy is the Policy of a node deciding on its own request want: its own
// name, and its own addresses alone.
func nodePolicy(want *x509.CertificateRequest) Policy {
	p := Policy{Names: []string{strings.TrimPrefix(want.Subject.CommonName, nodeUserPrefix)}}
	var ips CIDRs
	for _, ip := range want.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			a = a.Unmap()
			ips = append(ips, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if len(ips) > 0 {
		p.ServingIPs = ips
	}
	return p
}

// clientset is the clientset to hand client-go's certificate manager: client,
// with every CSR it creates approved by a.
func (a *selfApprover) clientset() kubernetes.Interface {
	return &approvingClientset{Interface: a.client, a: a}
}

// created is called with each CSR the node created.
func (a *selfApprover) created(csr *certificatesv1.CertificateSigningRequest) {
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		a.log.Warn("not approving the node's CSR: its request cannot be read", "csr", csr.Name, "error", err)
		return
	}
	own := OwnRequest{Name: csr.Name, UID: csr.UID, Username: csr.Spec.Username, Key: req.PublicKey, Want: a.want}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.approve(own)
	}()
}

// approve approves own, trying again with back-off until it is approved,
// denied, gone or the node stops.
func (a *selfApprover) approve(own OwnRequest) {
	// wait.ExponentialBackoffWithContext would give up once the back-off
	// reaches its cap; the delays go on at the cap until the time is up.
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	var last error // the last failure tried again, said if the time runs out
	err := a.backoff.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		csr, err := a.approver.CertificatesV1().CertificateSigningRequests().Get(ctx, own.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			a.log.Debug("reading the node's CSR; will retry", "csr", own.Name, "error", err)
			last = err
			return false, nil
		}
		if Decided(csr) {
			return true, nil // approved (by an admin, perhaps) or denied: not ours to change
		}
		if d := a.policy.Decide(csr, ByNode(own)); d.Verdict != Approve {
			return false, errors.New(d.Reason)
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "AutoApproved", Message: "approved by vkubelet for its own serving certificate (--approve-serving-csr)",
		})
		_, err = a.approver.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if err != nil {
			a.log.Debug("approving the node's CSR; will retry", "csr", own.Name, "error", err)
			last = err
			return false, nil
		}
		a.log.Info("approved own serving CSR", "csr", own.Name)
		return true, nil
	})
	if err != nil && a.ctx.Err() == nil {
		if ctx.Err() != nil && last != nil {
			err = fmt.Errorf("gave up after %s: %w", a.timeout, last)
		}
		a.log.Warn("not approving serving CSR", "csr", own.Name, "error", err)
	}
}

// approvingClientset is a clientset whose CSR creations are reported to the approver.
type approvingClientset struct {
	kubernetes.Interface
	a *selfApprover
}

func (c *approvingClientset) CertificatesV1() certificatesclient.CertificatesV1Interface {
	return &approvingCertificates{CertificatesV1Interface: c.Interface.CertificatesV1(), a: c.a}
}

type approvingCertificates struct {
	certificatesclient.CertificatesV1Interface
	a *selfApprover
}

func (c *approvingCertificates) CertificateSigningRequests() certificatesclient.CertificateSigningRequestInterface {
	return &approvingCSRs{CertificateSigningRequestInterface: c.CertificatesV1Interface.CertificateSigningRequests(), a: c.a}
}

type approvingCSRs struct {
	certificatesclient.CertificateSigningRequestInterface
	a *selfApprover
}

func (c *approvingCSRs) Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error) {
	out, err := c.CertificateSigningRequestInterface.Create(ctx, csr, opts)
	if err == nil && out.Spec.SignerName == certificatesv1.KubeletServingSignerName {
		c.a.created(out)
	}
	return out, err
}

// defaultApprovalBackoff spaces the tries of an approval: from 200 ms, doubling
// to once a minute, for defaultApprovalTimeout.
var defaultApprovalBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: time.Minute}

// defaultApprovalTimeout is how long an approval is tried; then the node logs
// that it gave up, with the last reason.
const defaultApprovalTimeout = 10 * time.Minute
