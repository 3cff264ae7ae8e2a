package identity

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certificatesclient "k8s.io/client-go/kubernetes/typed/certificates/v1"
)

// ownRequest is a CSR this node created: what the API server answered to its own
// Create, which no one else can forge.
type ownRequest struct {
	name     string
	uid      types.UID
	username string // spec.username: the identity the API server saw create it
	key      crypto.PublicKey
}

// ownCSRApprover approves the node's own kubelet-serving CSRs and nothing else.
// It sees the node's CSRs as client-go's certificate manager creates them,
// through the clientset it hands the manager, so it never lists or polls CSRs:
// it acts once per certificate the node asks for (the first, then each renewal).
//
// Matching a CSR by its subject and addresses alone is not enough: anyone
// allowed to create CSRs can ask for system:node:<node> with the node's
// addresses, and a node that approved every such request handed out its serving
// identity (found by a probe). A CSR is approved only if it is the very object
// the node created (name and UID), its public key is the one in the request the
// node sent, its spec.username is the identity the node created it as, and it
// asks for exactly the node's subject and addresses.
type ownCSRApprover struct {
	ctx context.Context
	// client creates the node's CSRs; approver reads and approves them (the same
	// clientset unless the node's own identity may not approve).
	client, approver kubernetes.Interface
	want             *x509.CertificateRequest
	log              *slog.Logger
	// backoff paces the retries of one approval (the API server may be away).
	backoff wait.Backoff
	wg      sync.WaitGroup
}

// clientset is the clientset to hand client-go's certificate manager: client,
// with every CSR it creates approved by a.
func (a *ownCSRApprover) clientset() kubernetes.Interface {
	return &approvingClientset{Interface: a.client, a: a}
}

// created is called with each CSR the node created.
func (a *ownCSRApprover) created(csr *certificatesv1.CertificateSigningRequest) {
	req, err := parseOwnRequest(csr)
	if err != nil {
		a.log.Warn("not approving the node's CSR: its request cannot be read", "csr", csr.Name, "error", err)
		return
	}
	own := ownRequest{name: csr.Name, uid: csr.UID, username: csr.Spec.Username, key: req.PublicKey}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.approve(own)
	}()
}

// approve approves own, trying again with back-off until it is approved,
// denied, gone or the node stops.
func (a *ownCSRApprover) approve(own ownRequest) {
	err := wait.ExponentialBackoffWithContext(a.ctx, a.backoff, func(ctx context.Context) (bool, error) {
		csr, err := a.approver.CertificatesV1().CertificateSigningRequests().Get(ctx, own.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			a.log.Debug("reading the node's CSR; will retry", "csr", own.name, "error", err)
			return false, nil
		}
		if Decided(csr) {
			return true, nil // approved (by an admin, perhaps) or denied: not ours to change
		}
		if err := checkOwn(csr, own, a.want); err != nil {
			return false, err
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "AutoApproved", Message: "approved by vkubelet for its own serving certificate (--approve-serving-csr)",
		})
		_, err = a.approver.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if err != nil {
			a.log.Debug("approving the node's CSR; will retry", "csr", own.name, "error", err)
			return false, nil
		}
		a.log.Info("approved own serving CSR", "csr", own.name)
		return true, nil
	})
	if err != nil && a.ctx.Err() == nil {
		a.log.Warn("not approving serving CSR", "csr", own.name, "error", err)
	}
}

// checkOwn says why csr is not the request own describes, asking for want; nil
// if it is.
func checkOwn(csr *certificatesv1.CertificateSigningRequest, own ownRequest, want *x509.CertificateRequest) error {
	switch {
	case csr.Name != own.name || csr.UID != own.uid:
		return fmt.Errorf("CSR %s (UID %s) is not the one the node created (%s, UID %s)", csr.Name, csr.UID, own.name, own.uid)
	case csr.Spec.Username != own.username:
		return fmt.Errorf("CSR %s was created by %q, not by the node's identity %q", csr.Name, csr.Spec.Username, own.username)
	case csr.Spec.SignerName != certificatesv1.KubeletServingSignerName:
		return fmt.Errorf("CSR %s is for signer %s", csr.Name, csr.Spec.SignerName)
	}
	req, err := parseOwnRequest(csr)
	if err != nil {
		return err
	}
	if k, ok := req.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(own.key) {
		return fmt.Errorf("CSR %s carries another public key than the node's", csr.Name)
	}
	if !matches(req, want) {
		return fmt.Errorf("CSR %s asks for another subject or other addresses than the node's", csr.Name)
	}
	return nil
}

func parseOwnRequest(csr *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return nil, errors.New("no PEM block in spec.request")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// matches reports whether req asks for the subject and addresses of want, and
// nothing else.
func matches(req, want *x509.CertificateRequest) bool {
	if req.Subject.CommonName != want.Subject.CommonName ||
		!slices.Equal(req.Subject.Organization, want.Subject.Organization) ||
		len(req.EmailAddresses) != 0 || len(req.URIs) != 0 ||
		!slices.Equal(req.DNSNames, want.DNSNames) || len(req.IPAddresses) != len(want.IPAddresses) {
		return false
	}
	for i := range req.IPAddresses {
		if !req.IPAddresses[i].Equal(want.IPAddresses[i]) {
			return false
		}
	}
	return true
}

// approvingClientset is a clientset whose CSR creations are reported to the approver.
type approvingClientset struct {
	kubernetes.Interface
	a *ownCSRApprover
}

func (c *approvingClientset) CertificatesV1() certificatesclient.CertificatesV1Interface {
	return &approvingCertificates{CertificatesV1Interface: c.Interface.CertificatesV1(), a: c.a}
}

type approvingCertificates struct {
	certificatesclient.CertificatesV1Interface
	a *ownCSRApprover
}

func (c *approvingCertificates) CertificateSigningRequests() certificatesclient.CertificateSigningRequestInterface {
	return &approvingCSRs{CertificateSigningRequestInterface: c.CertificatesV1Interface.CertificateSigningRequests(), a: c.a}
}

type approvingCSRs struct {
	certificatesclient.CertificateSigningRequestInterface
	a *ownCSRApprover
}

func (c *approvingCSRs) Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error) {
	out, err := c.CertificateSigningRequestInterface.Create(ctx, csr, opts)
	if err == nil && out.Spec.SignerName == certificatesv1.KubeletServingSignerName {
		c.a.created(out)
	}
	return out, err
}

// defaultApprovalBackoff retries an approval for about ten minutes.
var defaultApprovalBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 12, Cap: time.Minute}
