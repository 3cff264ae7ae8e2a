package controlplane

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vkubelet/vkubelet/internal/identity"
)

// BootstrapGroup is the extra group of the bootstrap tokens NodeBootstrapKubeconfig
// makes; the node TLS-bootstrap bindings name it.
const BootstrapGroup = "system:bootstrappers:vkubelet"

// nodeBootstrapBindings are what a cluster admin grants for the kubelet's TLS
// bootstrap: bootstrap tokens may create CSRs, and nodes may have
// kube-controller-manager approve the renewals of their own identities. Unlike
// kubeadm's, they do not let kube-controller-manager approve a bootstrap token's
// request for a node identity (the nodeclient right), which it would do for any
// node name: RunNodeApprover approves the names of this cluster's virtual nodes
// and denies the tokens anything else.
var nodeBootstrapBindings = []struct{ name, role, group string }{
	{"vkubelet:node-bootstrapper", "system:node-bootstrapper", BootstrapGroup},
	{"vkubelet:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
}

// NodeBootstrapKubeconfig prepares the cluster for nodes' TLS bootstrap and writes
// a bootstrap kubeconfig to path (default: in the control plane's directory): a new
// bootstrap token valid for ttl, and the role bindings above (kept if they exist).
// The CSRs are approved by RunNodeApprover and signed by kube-controller-manager,
// so the control plane must run it.
func (cp *ControlPlane) NodeBootstrapKubeconfig(ctx context.Context, path string, ttl time.Duration) (string, error) {
	if !cp.cfg.ControllerManager {
		return "", fmt.Errorf("TLS bootstrap needs kube-controller-manager (Config.ControllerManager) to approve and sign node CSRs")
	}
	c, err := cp.Client()
	if err != nil {
		return "", err
	}
	for _, b := range nodeBootstrapBindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating ClusterRoleBinding %s: %w", b.name, err)
		}
	}
	id, secret := randomToken(6), randomToken(16)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              BootstrapGroup,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"description":                    "vkubelet node TLS bootstrap",
		},
	}
	if _, err := c.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating bootstrap token: %w", err)
	}
	if path == "" {
		path = filepath.Join(cp.Dir, "bootstrap.kubeconfig")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["vkubelet"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthority: cp.PKI.CACert}
	cfg.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	cfg.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "vkubelet", AuthInfo: "bootstrap"}
	cfg.CurrentContext = "bootstrap"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// RunNodeApprover approves, until ctx ends, the certificate requests that the
// holders of NodeBootstrapKubeconfig's tokens send for the nodes names (and
// those nodes' own renewals and serving certificates for servingIPs), with the
// control plane's admin credential; it denies the tokens anything else
// (package internal/identity). It returns once the approver has started.
func (cp *ControlPlane) RunNodeApprover(ctx context.Context, names []string, servingIPs identity.IPSet, log *slog.Logger) error {
	c, err := cp.Client()
	if err != nil {
		return err
	}
	ctrl, err := identity.NewApprover(identity.ApproverConfig{Client: c, Logger: log, Policy: identity.Policy{
		Names: names, RequesterGroups: []string{BootstrapGroup}, ServingIPs: servingIPs,
	}})
	if err != nil {
		return err
	}
	go func() {
		if err := ctrl.Run(ctx, 2); err != nil && ctx.Err() == nil && log != nil {
			log.Error("the node CSR approver stopped", "error", err)
		}
	}()
	return nil
}

// randomToken is n characters of [a-z0-9], the alphabet of bootstrap tokens,
// uniformly drawn (bytes of 252 and above are skipped: 252 = 7 × 36).
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	var b [1]byte
	for len(out) < n {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		if b[0] < 252 {
			out = append(out, alphabet[int(b[0])%len(alphabet)])
		}
	}
	return string(out)
}
