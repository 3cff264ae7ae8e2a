package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func certFor(t *testing.T, cn string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestCheckIdentityRefusesAnotherNodesCertificate(t *testing.T) {
	if err := checkIdentity(certFor(t, "system:node:a"), "a"); err != nil {
		t.Errorf("own certificate refused: %v", err)
	}
	err := checkIdentity(certFor(t, "system:node:b"), "a")
	if err == nil || !strings.Contains(err.Error(), `"system:node:b"`) {
		t.Errorf("another node's certificate: err = %v", err)
	}
}

func TestTemplateIsTheNodesSubject(t *testing.T) {
	tmpl := clientTemplate("vk")
	if tmpl.Subject.CommonName != "system:node:vk" || len(tmpl.Subject.Organization) != 1 || tmpl.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %+v", tmpl.Subject)
	}
}

func TestNodeConfigKeepsServerAndCAButNotTheBootstrapCredential(t *testing.T) {
	bootstrap := &rest.Config{Host: "https://api:6443", BearerToken: "abcdef.0123456789abcdef",
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), CertData: []byte("c"), KeyData: []byte("k")}}
	c := nodeConfig(bootstrap, "/pki/kubelet-client-current.pem")
	if c.Host != bootstrap.Host || string(c.TLSClientConfig.CAData) != "ca" {
		t.Errorf("server or CA lost: %+v", c)
	}
	if c.BearerToken != "" || c.TLSClientConfig.CertData != nil || c.TLSClientConfig.KeyData != nil {
		t.Errorf("bootstrap credential kept: %+v", c)
	}
	if c.TLSClientConfig.CertFile != "/pki/kubelet-client-current.pem" || c.TLSClientConfig.KeyFile != c.TLSClientConfig.CertFile {
		t.Errorf("certificate files %q %q", c.TLSClientConfig.CertFile, c.TLSClientConfig.KeyFile)
	}
}
