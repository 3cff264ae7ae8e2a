package identity_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func startApprover(t *testing.T, p identity.Policy) {
	t.Helper()
	ctrl, err := identity.NewApprover(identity.ApproverConfig{
		Client: testenv.Client(t), Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx, 2) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// The bootstrap account lacks the nodeclient right, so kube-controller-manager
// approves none of its requests; the approver issues the install's nodes their
// identities and denies the account everything else: another node's identity,
// another node's serving certificate, an address that is not the node's.
func TestAStolenBootstrapTokenObtainsOnlyTheInstallsNodes(t *testing.T) {
	ns := testenv.Namespace(t)
	user, stolen := testenv.CSRCreator(t, ns, "vk-bootstrap")

	// Asked for before any approver runs: kube-controller-manager does not
	// approve it (the account lacks nodeclient), and the approver denies it.
	early := testenv.AskForNodeCertificate(t, stolen, certificatesv1.KubeAPIServerClientKubeletSignerName, "victim-early")

	startApprover(t, identity.Policy{
		Names: []string{"owned-a", "owned-b", "owned-c"}, Requesters: []string{user},
		ServingIPs: identity.CIDRs{netip.MustParsePrefix("10.250.0.7/32")},
	})
	client := map[string]string{}
	for _, node := range []string{"owned-a", "owned-b", "owned-c", "victim-node", "owned-d"} {
		client[node] = testenv.AskForNodeCertificate(t, stolen, certificatesv1.KubeAPIServerClientKubeletSignerName, node)
	}
	servingVictim := testenv.AskForNodeCertificate(t, stolen, certificatesv1.KubeletServingSignerName, "victim-node", "10.9.9.9")
	servingOwnedElsewhere := testenv.AskForNodeCertificate(t, stolen, certificatesv1.KubeletServingSignerName, "owned-a", "10.9.9.9")
	servingOwned := testenv.AskForNodeCertificate(t, stolen, certificatesv1.KubeletServingSignerName, "owned-a", "10.250.0.7")

	want := map[string]string{
		client["owned-a"]: "issued", client["owned-b"]: "issued", client["owned-c"]: "issued",
		client["victim-node"]: "denied", client["owned-d"]: "denied", early: "denied",
		servingVictim: "denied", servingOwnedElsewhere: "denied", servingOwned: "issued",
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		for name, w := range want {
			if got := testenv.CSROutcome(t, testenv.Client(t), name); got != w {
				return false, name + " is " + got + ", want " + w
			}
		}
		return true, ""
	})
	// Nor can the account approve anything itself.
	testenv.CheckCannotBecomeAnotherNode(t, stolen, "victim-2", "10.250.0.7")

	// A denial says why, on the CSR and in an Event.
	csr, err := testenv.Client(t).CertificatesV1().CertificateSigningRequests().Get(context.Background(), client["victim-node"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := csr.Status.Conditions[len(csr.Status.Conditions)-1]; c.Reason != "VkubeletDenied" || c.Message != `node "victim-node" is not one of this install's nodes` {
		t.Errorf("denial condition %+v", c)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := testenv.Client(t).CoreV1().Events(metav1.NamespaceDefault).List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=" + client["victim-node"]})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "Denied" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, "no Denied Event"
	})
}

// A node of the install bootstraps its identity through the approver with the
// bootstrap account, as the node agent does (StartClient), and renews it as
// itself; it cannot ask, as itself, for another node's identity.
func TestAnInstallsNodeBootstrapsAndRenewsThroughTheApprover(t *testing.T) {
	ns := testenv.Namespace(t)
	user, _ := testenv.CSRCreator(t, ns, "vk-bootstrap")
	startApprover(t, identity.Policy{Names: []string{"vk-boot"}, Requesters: []string{user}})
	// The node agent's bootstrap configuration: the API server and a token.
	boot := testenv.TokenConfig(t, ns, "vk-bootstrap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodeCfg, err := identity.StartClient(ctx, identity.ClientConfig{NodeName: "vk-boot", Bootstrap: boot, Dir: t.TempDir(), WaitTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	if u := testenv.User(t, node); u.Username != "system:node:vk-boot" {
		t.Fatalf("the node is %q", u.Username)
	}
	renewal := testenv.AskForNodeCertificate(t, node, certificatesv1.KubeAPIServerClientKubeletSignerName, "vk-boot")
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		r := testenv.CSROutcome(t, testenv.Client(t), renewal)
		return r == "issued", "the renewal is " + r
	})
	// Asking as itself for another node's identity is refused by the API
	// server's NodeRestriction from v1.31; v1.30's creates the CSR (seen in
	// the skew run), and the approver must deny it.
	other, err := testenv.TryAskForNodeCertificate(t, node, certificatesv1.KubeAPIServerClientKubeletSignerName, "vk-other")
	if apierrors.IsForbidden(err) {
		return
	}
	if err != nil {
		t.Fatalf("the node asking for another node's identity: %v, want Forbidden or a CSR the approver denies", err)
	}
	if minor, _ := controlplane.MinorOf(controlplane.SelectedKubernetesVersion()); minor >= 31 {
		t.Errorf("the node asking for another node's identity: created %s, want Forbidden (NodeRestriction, v1.31 on)", other)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		r := testenv.CSROutcome(t, testenv.Client(t), other)
		return r == "denied", "the CSR for another node's identity is " + r
	})
}
