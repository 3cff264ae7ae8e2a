package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// TestANodeRunsUnderItsOwnIdentity starts a node with only a bootstrap token, as a
// kubelet joins a cluster: it must obtain a system:node:<name> client certificate
// (approved and signed by kube-controller-manager), run a pod that references a
// Secret and mounts its service-account token, and, confined by the Node
// authorizer, be able to read that Secret but no other.
func TestANodeRunsUnderItsOwnIdentity(t *testing.T) {
	const node = "vk-identity"
	cp := testenv.ControlPlane(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	dir := t.TempDir()
	// The bootstrap token may create CSRs, not have them approved: the node's
	// are approved by the approver for this node's name and address.
	bootstrap := testenv.NodeBootstrap(t, node)
	nodeKubeconfig := filepath.Join(dir, "node.kubeconfig")
	_, prov := startNode(t, node, mock.Config{}, func(cfg *agent.Config) {
		cfg.RESTConfig, cfg.Kubeconfig, cfg.BootstrapKubeconfig = nil, nodeKubeconfig, bootstrap
		cfg.ServingCSRApprover, cfg.ClientCAFile = cp.RESTConfig, cp.PKI.CACert
	})

	// The node wrote its kubeconfig, and it authenticates as the node.
	restCfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	if u := testenv.User(t, nodeClient); u.Username != "system:node:"+node || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("the node authenticates as %q %v, want system:node:%s in system:nodes", u.Username, u.Groups, node)
	}
	// Its certificate came from a kube-apiserver-client-kubelet CSR that the
	// approver approved and the controller-manager signed.
	csrs, err := c.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		for _, cond := range csr.Status.Conditions {
			approved = approved || cond.Type == certificatesv1.CertificateApproved && len(csr.Status.Certificate) > 0
		}
	}
	if !approved {
		t.Error("no approved and issued kube-apiserver-client-kubelet CSR")
	}

	for _, name := range []string{"referenced", "unreferenced"} {
		if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"password": name + "-value"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Before a pod references it, the node may not read the Secret.
	if _, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, "referenced", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the node read a Secret no pod of it references: err = %v", err)
	}
	_, err = c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tolerateVirtualNode(),
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "referenced"}, Key: "password"}}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, "pod app is " + string(p.Status.Phase) + " " + p.Status.Message
	})
	rp := prov.Resolved(ns, "app")
	if rp == nil {
		t.Fatal("the provider got no resolved pod")
	}
	var password string
	for _, e := range rp.Env["c"] {
		if e.Name == "PASSWORD" {
			password = e.Value
		}
	}
	if password != "referenced-value" {
		t.Errorf("PASSWORD = %q, want the referenced Secret's value", password)
	}
	token := false
	for _, v := range rp.Volumes {
		for _, f := range v.Files {
			token = token || f.Path == "token" && len(f.Data) > 0
		}
	}
	if !token {
		t.Error("the pod's service-account token volume has no token: the node's TokenRequest failed")
	}

	// Now the node may read the referenced Secret, and still not the other one,
	// nor list Secrets.
	if _, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, "referenced", metav1.GetOptions{}); err != nil {
		t.Errorf("the node cannot read the Secret its pod references: %v", err)
	}
	if _, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, "unreferenced", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node read a Secret no pod of it references: err = %v", err)
	}
	if _, err := nodeClient.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node listed the namespace's Secrets: err = %v", err)
	}
	// NodeRestriction: the node may not change another node.
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node + "-other"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node created another node: err = %v", err)
		_ = c.CoreV1().Nodes().Delete(ctx, node+"-other", metav1.DeleteOptions{})
	}
}
