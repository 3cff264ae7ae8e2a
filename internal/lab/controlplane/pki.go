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

	// FrontProxyCACert/Key is the CA of the API server's aggregation layer: an
	// aggregated API server (metrics-server) believes the X-Remote-User headers of
	// a request only from a client certificate signed by it, FrontProxyClientCert
	// (CN front-proxy-client), which kube-apiserver presents when it proxies.
	FrontProxyCACert, FrontProxyCAKey         string
	FrontProxyClientCert, FrontProxyClientKey string

	dir string
	ca  *keyPair // kept to sign the certificates of components started later
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
		FrontProxyCACert: p("front-proxy-ca.crt"), FrontProxyCAKey: p("front-proxy-ca.key"),
		FrontProxyClientCert: p("front-proxy-client.crt"), FrontProxyClientKey: p("front-proxy-client.key"),
		dir: dir,
	}

	var err error
	if pki.ca, err = newCA("vkubelet-local-ca"); err != nil {
		return nil, err
	}
	if err := writePair(pki.ca, pki.CACert, pki.CAKey); err != nil {
		return nil, err
	}
	frontProxyCA, err := newCA("vkubelet-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if err := writePair(frontProxyCA, pki.FrontProxyCACert, pki.FrontProxyCAKey); err != nil {
		return nil, err
	}
	leaves := []struct {
		ca        *keyPair
		cert, key string
		subject   pkix.Name
		server    bool
		ips       []net.IP
		dns       []string
	}{
		{pki.ca, pki.APIServerCert, pki.APIServerKey, pkix.Name{CommonName: "kube-apiserver"}, true,
			[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(serviceClusterIP)},
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{pki.ca, pki.AdminCert, pki.AdminKey, pkix.Name{CommonName: "vkubelet-admin", Organization: []string{"system:masters"}}, false, nil, nil},
		{pki.ca, pki.KubeletClientCert, pki.KubeletClientKey, pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, false, nil, nil},
		{pki.ca, pki.SchedulerCert, pki.SchedulerKey, pkix.Name{CommonName: "system:kube-scheduler"}, false, nil, nil},
		{pki.ca, pki.ControllerManagerCert, pki.ControllerManagerKey, pkix.Name{CommonName: "system:kube-controller-manager"}, false, nil, nil},
		{frontProxyCA, pki.FrontProxyClientCert, pki.FrontProxyClientKey, pkix.Name{CommonName: frontProxyClientName}, false, nil, nil},
	}
	for _, l := range leaves {
		if err := issue(l.ca, l.cert, l.key, l.subject, l.server, l.ips, l.dns); err != nil {
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

// frontProxyClientName is the CN of FrontProxyClientCert, the one name aggregated
// API servers accept request headers from (--requestheader-allowed-names).
const frontProxyClientName = "front-proxy-client"

// issue writes a certificate and key signed by ca.
func issue(ca *keyPair, certPath, keyPath string, subject pkix.Name, server bool, ips []net.IP, dns []string) error {
	kp, err := ca.sign(subject, server, ips, dns)
	if err != nil {
		return fmt.Errorf("signing %s: %w", subject.CommonName, err)
	}
	return writePair(kp, certPath, keyPath)
}

// issueClient writes a client certificate of the cluster CA for user (and groups)
// into the PKI directory as <name>.crt and <name>.key, and returns their paths.
func (p *PKI) issueClient(name, user string, groups ...string) (cert, key string, err error) {
	cert, key = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	return cert, key, issue(p.ca, cert, key, pkix.Name{CommonName: user, Organization: groups}, false, nil, nil)
}

// issueServing writes a serving certificate of the cluster CA for the given
// addresses and DNS names as <name>.crt and <name>.key, and returns their paths.
func (p *PKI) issueServing(name string, ips []net.IP, dns []string) (cert, key string, err error) {
	cert, key = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	return cert, key, issue(p.ca, cert, key, pkix.Name{CommonName: name}, true, ips, dns)
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
