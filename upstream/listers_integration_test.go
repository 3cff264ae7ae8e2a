package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// An upstream provider's listers, read with a node's own identity, serve what its
// pods reference and what a node may list (its pods, Services): the Node
// authorizer refuses none of the adapter's reads.
func TestTheListersReadWithANodesIdentity(t *testing.T) {
	const nodeName = "upstream-listers"
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, create := range []func() error{
		func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"p": "s"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{NodeName: nodeName,
			Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "p"}}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	nodeClient := nodeIdentity(t, nodeName)
	if _, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the node's identity read a Secret no pod of it references (%v): the test proves nothing", err)
	}
	var cfg nodeutil.ProviderConfig
	f := newFake()
	seen := map[string]error{}
	f.onCreate = func(p *corev1.Pod) {
		_, seen["its ConfigMap"] = cfg.ConfigMaps.ConfigMaps(ns).Get("settings")
		_, seen["its Secret"] = cfg.Secrets.Secrets(ns).Get("creds")
		_, seen["itself"] = cfg.Pods.Pods(ns).Get(p.Name)
		_, seen["a Service"] = cfg.Services.Services(ns).Get("web")
	}
	a, err := New(ctx, Config{NodeName: nodeName, Client: nodeClient}, func(c nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		cfg = c
		return f, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CreatePod(ctx, pod.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for what, err := range seen {
		if err != nil {
			t.Errorf("the provider could not read %s: %v", what, err)
		}
	}
	if _, err := cfg.Secrets.Secrets(ns).Get("other"); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret no pod references: %v, want NotFound", err)
	}
	if err := a.DeletePod(ctx, pod.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if held, _ := cfg.ConfigMaps.List(labels.Everything()); len(held) != 0 {
		t.Errorf("%d ConfigMaps held after the pod went", len(held))
	}
}

// nodeIdentity is a client that authenticates as system:node:<name>, with a
// certificate from a kube-apiserver-client-kubelet CSR approved by the admin and
// signed by the controller-manager.
func nodeIdentity(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	c := testenv.Client(t)
	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "upstream-listers-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "a node identity for the test"})
	if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cert []byte
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got, err := c.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cert = got.Status.Certificate
		return len(cert) > 0, "the CSR is not signed"
	})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	rc := rest.AnonymousClientConfig(testenv.ControlPlane(t).RESTConfig)
	rc.CertData, rc.KeyData = cert, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	nc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}
