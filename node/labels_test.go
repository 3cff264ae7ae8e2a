package node

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Which labels NodeRestriction refuses a node writing its own Node: those in the
// kubernetes.io and k8s.io namespaces, subdomains included, that are not the
// kubelet's.
func TestRefusedToNodes(t *testing.T) {
	for key, refused := range map[string]bool{
		"kubernetes.io/role": true,
		"alpha.service-controller.kubernetes.io/exclude-balancer": true,
		"node-role.kubernetes.io/worker":                          true,
		"example.k8s.io/x":                                        true,
		"kubernetes.io/hostname":                                  false,
		"kubernetes.io/arch":                                      false,
		"topology.kubernetes.io/zone":                             false,
		"node.kubernetes.io/exclude-from-external-load-balancers": false,
		"kubelet.kubernetes.io/anything":                          false,
		"type":                                                    false,
		"example.com/kubernetes.io":                               false,
		"notkubernetes.io/x":                                      false,
	} {
		if got := refusedToNodes(key); got != refused {
			t.Errorf("refusedToNodes(%q) = %v, want %v", key, got, refused)
		}
	}
}

// A node under its own identity does not start with labels the operator gave
// that it may not set, as the kubelet refuses such --node-labels.
func TestANodeAsItselfRefusesOperatorLabelsItMayNotSet(t *testing.T) {
	cfg := Config{Client: fake.NewClientset(), NodeName: "vk", AsNode: true,
		Labels: map[string]string{"site": "east", "node-role.kubernetes.io/edge": "", "kubernetes.io/role": "edge"}}
	_, err := NewController(cfg)
	if err == nil || !strings.Contains(err.Error(), "kubernetes.io/role, node-role.kubernetes.io/edge") {
		t.Fatalf("NewController = %v, want an error naming both refused labels", err)
	}
	cfg.AsNode = false
	if _, err := NewController(cfg); err != nil {
		t.Errorf("with another credential: %v", err)
	}
}

// refusingProvider configures its node with a label a node may not set on itself.
type refusingProvider struct{ testProvider }

func (p *refusingProvider) ConfigureNode(ctx context.Context, n *corev1.Node) {
	p.testProvider.ConfigureNode(ctx, n)
	n.Labels["alpha.service-controller.kubernetes.io/exclude-balancer"] = "true"
}

// A provider cannot know the node's credential: under the node's own identity
// the labels it set that NodeRestriction refuses are left out, so the node
// registers; with another credential they are kept.
func TestAProvidersLabelsANodeMayNotSetAreLeftOutAsTheNode(t *testing.T) {
	for _, asNode := range []bool{true, false} {
		c := newFixture(t).newController()
		c.cfg.AsNode = asNode
		c.configurer = &refusingProvider{}
		c.configure(context.Background())
		labels := c.desiredCopy().Labels
		_, has := labels["alpha.service-controller.kubernetes.io/exclude-balancer"]
		if has == asNode {
			t.Errorf("AsNode %v: the refused label kept %v, labels %v", asNode, has, slices.Sorted(maps.Keys(labels)))
		}
		if labels[corev1.LabelTopologyZone] != "zone-a" {
			t.Errorf("AsNode %v: the provider's allowed labels lost: %v", asNode, labels)
		}
	}
}
