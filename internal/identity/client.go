package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
)

// ClientConfig says who the node is and how it gets its first client
// certificate.
type ClientConfig struct {
	NodeName string
	// Bootstrap is the credential used while the node has no valid certificate of
	// its own. Only its server, CA and credentials are used.
	Bootstrap *rest.Config
	// Dir keeps the current certificate and key (kubelet-client-current.pem),
	// across restarts.
	Dir string
	// WaitTimeout bounds the wait for the first certificate; zero waits until
	// ctx ends, as the kubelet does while its CSR is not approved.
	WaitTimeout time.Duration
	Logger      *slog.Logger
}

// clientPairPrefix names the certificate files in Dir, as the kubelet names its own.
const clientPairPrefix = "kubelet-client"

// StartClient returns a client configuration that authenticates as the node
// with its own certificate. It asks for one with the bootstrap credential if Dir
// holds none that is valid, and returns once one is issued. Until ctx ends the
// certificate is renewed before it expires.
func StartClient(ctx context.Context, cfg ClientConfig) (*rest.Config, error) {
	if cfg.NodeName == "" || cfg.Dir == "" || cfg.Bootstrap == nil {
		return nil, errors.New("client certificate: NodeName, Dir and Bootstrap are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	store, err := certificate.NewFileStore(clientPairPrefix, cfg.Dir, cfg.Dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("client certificate store: %w", err)
	}
	nodeCfg := nodeConfig(cfg.Bootstrap, store.CurrentPath())
	bootstrap, err := kubernetes.NewForConfig(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	m, err := certificate.NewManager(&certificate.Config{
		// Renewals are asked for as the node itself, which the
		// selfnodeclient approval rule covers; only a node without a valid
		// certificate uses the bootstrap credential.
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			if current == nil {
				return bootstrap, nil
			}
			return kubernetes.NewForConfig(nodeCfg)
		},
		Template: clientTemplate(cfg.NodeName),
		// ECDSA keys, so no key encipherment: the usages the
		// kube-apiserver-client-kubelet signer and its approver accept.
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		CertificateStore: store,
		Name:             "kubelet-client",
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate manager: %w", err)
	}
	if err := startManager(ctx, m, awaited{
		node: cfg.NodeName, kind: "client", signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		timeout: cfg.WaitTimeout, log: cfg.Logger,
		waiting: "waiting for the node's client certificate (TLS bootstrap): its CSR must be approved (kubectl get csr)",
	}); err != nil {
		return nil, err
	}
	cert := m.Current()
	if err := checkIdentity(cert, cfg.NodeName); err != nil {
		m.Stop()
		return nil, err
	}
	cfg.Logger.Info("authenticating as the node", "user", "system:node:"+cfg.NodeName, "expires", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nodeCfg, nil
}

// clientTemplate is the client certificate request of node name: the subject
// the Node authorizer maps to the node.
func clientTemplate(name string) *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}}
}

// nodeConfig is bootstrap's server and CA with the certificate and key of the
// PEM file pair (both in one file, as the certificate store writes them) as the
// credential. Given as file names, client-go's transport re-reads them every few
// minutes and moves to a renewed certificate by itself.
func nodeConfig(bootstrap *rest.Config, pair string) *rest.Config {
	out := rest.AnonymousClientConfig(bootstrap)
	out.TLSClientConfig.CertFile, out.TLSClientConfig.KeyFile = pair, pair
	out.TLSClientConfig.CertData, out.TLSClientConfig.KeyData = nil, nil
	return out
}

// checkIdentity refuses a certificate issued for another name: a stale pair left
// in a directory shared by mistake would otherwise make this node act as
// another one.
func checkIdentity(cert *tls.Certificate, name string) error {
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		cert.Leaf = leaf
	}
	if want := "system:node:" + name; leaf.Subject.CommonName != want {
		return fmt.Errorf("client certificate in the certificate directory is for %q, not %q: remove it or use another --cert-dir", leaf.Subject.CommonName, want)
	}
	return nil
}
