package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the set of files the control plane authenticates with. Paths are absolute.
type PKI struct {
	CACert, CAKey string // cluster CA: signs every certificate below and kubelet-serving CSRs

	APIServerCert, APIServerKey string // serving certificate of kube-apiserver

	AdminCert, AdminKey string // client certificate in system:masters

	// KubeletClientCert/Key is what kube-apiserver presents to node kubelet APIs
	// (logs, exec, port-forward); a kubelet API authenticates it against CACert.
	KubeletClientCert, KubeletClientKey string

	SchedulerCert, SchedulerKey                 string
	ControllerManagerCert, ControllerManagerKey string

	ServiceAccountKey, ServiceAccountPub string // signs and verifies service-account tokens
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// generatePKI writes a fresh CA and the certificates signed by it into dir.
func generatePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	pki := &PKI{
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		APIServerCert: p("apiserver.crt"), APIServerKey: p("apiserver.key"),
		AdminCert: p("admin.crt"), AdminKey: p("admin.key"),
		KubeletClientCert: p("apiserver-kubelet-client.crt"), KubeletClientKey: p("apiserver-kubelet-client.key"),
		SchedulerCert: p("scheduler.crt"), SchedulerKey: p("scheduler.key"),
		ControllerManagerCert: p("controller-manager.crt"), ControllerManagerKey: p("controller-manager.key"),
		ServiceAccountKey: p("sa.key"), ServiceAccountPub: p("sa.pub"),
	}

	ca, err := newCA("vkubelet-local-ca")
	if err != nil {
		return nil, err
	}
	if err := writePair(ca, pki.CACert, pki.CAKey); err != nil {
		return nil, err
	}
	leaves := []struct {
		cert, key string
		subject   pkix.Name
		server    bool
		ips       []net.IP
		dns       []string
	}{
		{pki.APIServerCert, pki.APIServerKey, pkix.Name{CommonName: "kube-apiserver"}, true,
			[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(serviceClusterIP)},
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{pki.AdminCert, pki.AdminKey, pkix.Name{CommonName: "vkubelet-admin", Organization: []string{"system:masters"}}, false, nil, nil},
		{pki.KubeletClientCert, pki.KubeletClientKey, pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, false, nil, nil},
		{pki.SchedulerCert, pki.SchedulerKey, pkix.Name{CommonName: "system:kube-scheduler"}, false, nil, nil},
		{pki.ControllerManagerCert, pki.ControllerManagerKey, pkix.Name{CommonName: "system:kube-controller-manager"}, false, nil, nil},
	}
	for _, l := range leaves {
		kp, err := ca.sign(l.subject, l.server, l.ips, l.dns)
		if err != nil {
			return nil, fmt.Errorf("signing %s: %w", l.subject.CommonName, err)
		}
		if err := writePair(kp, l.cert, l.key); err != nil {
			return nil, err
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(saKey, pki.ServiceAccountKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(pki.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	return pki, nil
}

func newCA(cn string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func (ca *keyPair) sign(subject pkix.Name, server bool, ips []net.IP, dns []string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func writePair(kp *keyPair, certPath, keyPath string) error {
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw}), 0o644); err != nil {
		return err
	}
	return writeKey(kp.key, keyPath)
}

func writeKey(key crypto.Signer, path string) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
