package node

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
)

// A NodeSet's nodes keep their desired Nodes packed against each other: a
// sibling's costs a fraction of its encoding, and reads back the same.
func TestSiblingNodesKeepTheirDesiredNodesPacked(t *testing.T) {
	restore := desiredDicts.Relearn()
	defer restore()
	client := fake.NewClientset()
	w, err := NewWatch(client)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("vk-sibling-%d", i)
		c, err := NewController(Config{Client: client, NodeName: name, ProviderName: "test", Provider: &testProvider{},
			InternalIP: "10.1.2.3", KubeletPort: int32(20000 + i), Watch: w})
		if err != nil {
			t.Fatal(err)
		}
		c.configure(context.Background())
		want := desiredNode(c.cfg)
		(&testProvider{}).ConfigureNode(context.Background(), want)
		got := c.desiredCopy()
		if got.Name != name || got.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(20000+i) ||
			!equality.Semantic.DeepEqual(got.Status.Capacity, want.Status.Capacity) || got.Spec.ProviderID != want.Spec.ProviderID {
			t.Fatalf("%s: the desired node read back differs:\n%s", name, diff.Diff(want, got))
		}
		raw, err := got.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes encoded, %d packed", name, len(raw), len(c.desired))
		if i > 0 && len(c.desired) > len(raw)/4 {
			t.Errorf("%s: a sibling's desired node packed to %d bytes of %d", name, len(c.desired), len(raw))
		}
	}
}

// A node alone keeps its desired Node as encoded: no dictionary is made for it.
func TestANodeAloneKeepsItsDesiredNodeEncoded(t *testing.T) {
	restore := desiredDicts.Relearn()
	defer restore()
	c, err := NewController(Config{Client: fake.NewClientset(), NodeName: testNode, ProviderName: "test", Provider: &testProvider{}})
	if err != nil {
		t.Fatal(err)
	}
	c.configure(context.Background())
	raw, err := c.desiredCopy().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(c.desired) {
		t.Fatal("a node alone keeps its desired node other than as encoded")
	}
	if desiredDicts.Of(1) != nil {
		t.Fatal("a node alone made a dictionary")
	}
}
