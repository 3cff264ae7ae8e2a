package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
)

// ServingConfig says where the serving certificate comes from. With CertFile and KeyFile set they
// are used; else with SelfSigned a self-signed certificate is made; else a CSR is
// sent to the cluster.
type ServingConfig struct {
	CertFile, KeyFile string
	SelfSigned        bool

	// For the CSR path: the node's name and addresses, the client, and the
	// directory where the issued certificate and its key are kept across restarts.
	NodeName string
	IPs      []net.IP
	DNSNames []string
	Client   kubernetes.Interface
	// Approver, if set, approves the node's CSRs (AutoApprove) in place of
	// Client: a node authenticating as itself may create CSRs but not approve
	// them, so a tool with that right (`vkubeletctl up`) lends its own.
	Approver    kubernetes.Interface
	Dir         string
	AutoApprove bool
	// WaitTimeout bounds the wait for the first certificate; zero waits until ctx
	// ends, as the kubelet does while an admin has not approved its CSR.
	WaitTimeout time.Duration
	Logger      *slog.Logger
}

// GetCertificate hands out a node's current serving certificate, as a
// tls.Config's GetCertificate does.
type GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// ServingCertificate returns what hands out the node's current serving certificate. On the
// CSR path it returns once the first certificate is issued; the manager keeps
// renewing it until ctx ends. A process serving many nodes' kubelet APIs on one
// kubeletapi.Port keeps this alone of each node, and one TLS configuration
// (a tls.Config is some 500 bytes) for all.
func ServingCertificate(ctx context.Context, cfg ServingConfig) (GetCertificate, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.CertFile != "" || cfg.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading serving certificate: %w", err)
		}
		return fixed(&cert), nil
	case cfg.SelfSigned:
		cert, err := selfSigned(cfg.NodeName, cfg.IPs, cfg.DNSNames)
		if err != nil {
			return nil, err
		}
		cfg.Logger.Warn("serving the kubelet API with a self-signed certificate; the API server cannot verify it")
		return fixed(cert), nil
	default:
		return servingFromCSR(ctx, cfg)
	}
}

// fixed hands out cert, always.
func fixed(cert *tls.Certificate) GetCertificate {
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
}

func servingFromCSR(ctx context.Context, cfg ServingConfig) (GetCertificate, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Dir == "" {
		return nil, errors.New("serving certificate by CSR: Client, NodeName and Dir are required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	store, err := certificate.NewFileStore("kubelet-server", cfg.Dir, cfg.Dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("serving certificate store: %w", err)
	}
	template := &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + cfg.NodeName, Organization: []string{"system:nodes"}},
		DNSNames:    cfg.DNSNames,
		IPAddresses: cfg.IPs,
	}
	client := cfg.Client
	if cfg.AutoApprove {
		approvingClient := cfg.Approver
		if approvingClient == nil {
			approvingClient = cfg.Client
		}
		client = newSelfApprover(ctx, cfg.Client, approvingClient, template, cfg.Logger).clientset()
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		Template:    template,
		SignerName:  certificatesv1.KubeletServingSignerName,
		// ECDSA keys: no key encipherment, as the kubelet-serving signer expects.
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		CertificateStore: store,
		Name:             "kubelet-serving",
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate manager: %w", err)
	}
	w := awaited{node: cfg.NodeName, kind: "serving", signer: certificatesv1.KubeletServingSignerName, timeout: cfg.WaitTimeout, log: cfg.Logger}
	if !cfg.AutoApprove {
		w.waiting = "waiting for the kubelet-serving CSR to be approved (kubectl get csr; kubectl certificate approve <name>)"
	}
	if err := startManager(ctx, m, w); err != nil {
		return nil, err
	}
	cfg.Logger.Info("serving certificate issued by the cluster", "node", cfg.NodeName)
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := m.Current(); c != nil {
			return c, nil
		}
		return nil, errors.New("no serving certificate")
	}, nil
}

// selfSignedKey is the key of every self-signed certificate of the process:
// ECDSA P-256, made in microseconds where an RSA key takes tens of
// milliseconds. The nodes of a process share it. Nothing can verify a
// self-signed certificate, so a key of each node's own would protect nothing
// more, and with the form crypto/ecdsa precomputes for signing a key is some
// 600 bytes kept for good, for each of a NodeSet's thousand nodes.
var selfSignedKey = sync.OnceValues(func() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
})

// selfSigned makes a self-signed certificate for name, ips and dns, with the
// process's selfSignedKey. Nothing verifies it (the API server does not check
// kubelet certificates unless given a CA), so it carries no CA of its own; it
// is valid for a year, as client-go's self-signed certificates are.
func selfSigned(name string, ips []net.IP, dns []string) (*tls.Certificate, error) {
	key, err := selfSignedKey()
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
