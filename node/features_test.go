package node

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

// declaringProvider is the test provider declaring features.
type declaringProvider struct {
	*testProvider
	features []string
}

func (p declaringProvider) DeclaredFeatures() []string { return p.features }

// controllerFor is the fixture's controller with provider p in place of the
// fixture's, configured.
func (f *fixture) controllerFor(p any) *Controller {
	f.t.Helper()
	c := f.newController()
	c.cfg.Provider = p
	c.configure(context.Background())
	return c
}

// The features a provider declares are the node's status.declaredFeatures,
// sorted and once each, as the API server takes them; a name it would refuse
// is left out rather than the whole status refused.
func TestTheProvidersFeaturesAreDeclaredSorted(t *testing.T) {
	f := newFixture(t)
	c := f.controllerFor(declaringProvider{f.provider, []string{"RestartAllContainersOnContainerExits", "InPlacePodVerticalScalingInitContainers", "not a feature", "RestartAllContainersOnContainerExits"}})
	if err := c.writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	created := f.expectActions("get nodes", "create nodes")[1].(core.CreateAction).GetObject().(*corev1.Node)
	want := []string{"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
	if got := created.Status.DeclaredFeatures; !reflect.DeepEqual(got, want) {
		t.Errorf("declaredFeatures of the node created = %q, want %q", got, want)
	}
}

// Over an existing node, the status patch of a declaring provider sets
// declaredFeatures whole (and removes it when the provider declares none);
// that of a provider declaring nothing leaves the field alone.
func TestDeclaredFeaturesArePatchedOnlyForADeclaringProvider(t *testing.T) {
	existing := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-old"},
			Status:     corev1.NodeStatus{DeclaredFeatures: []string{"Old"}},
		}
	}
	cases := []struct {
		name     string
		provider func(*testProvider) any
		want     any // the patch's declaredFeatures; absent: the key is not there
		absent   bool
		after    []string
	}{
		{"declaring", func(p *testProvider) any { return declaringProvider{p, []string{"B", "A"}} }, []any{"A", "B"}, false, []string{"A", "B"}},
		{"declaring none", func(p *testProvider) any { return declaringProvider{p, nil} }, nil, false, nil},
		{"not a declarer", func(p *testProvider) any { return p }, nil, true, []string{"Old"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, existing())
			c := f.controllerFor(tc.provider(f.provider))
			if err := c.writeNode(context.Background()); err != nil {
				t.Fatal(err)
			}
			var status core.Action
			for _, a := range f.actions() {
				if isStatusPatch(a) {
					status = a
				}
			}
			if status == nil {
				t.Fatal("no status patch")
			}
			got, ok := decodePatch(t, status)["status"].(map[string]any)["declaredFeatures"]
			if ok == tc.absent || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("patch's declaredFeatures = %v (present %v), want %v (present %v)", got, ok, tc.want, !tc.absent)
			}
			if n := f.node(); !reflect.DeepEqual(n.Status.DeclaredFeatures, tc.after) {
				t.Errorf("node's declaredFeatures = %q, want %q", n.Status.DeclaredFeatures, tc.after)
			}
		})
	}
}

// An API server without status.declaredFeatures (before v1.35) gets none: the
// node it creates has none, and the status patch of an existing one leaves
// the key out, as a kubelet of that release writes it.
func TestNoFeaturesAreDeclaredToAServerWithoutDeclaredFeatures(t *testing.T) {
	declaring := func(f *fixture) *Controller {
		c := f.newControllerWith(func(cfg *Config) {
			cfg.Provider = declaringProvider{f.provider, []string{"RestartAllContainersOnContainerExits"}}
			cfg.APIFeatures = apifeatures.Without(apifeatures.NodeDeclaredFeatures)
		})
		c.configure(context.Background())
		return c
	}
	f := newFixture(t)
	if err := declaring(f).writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	created := f.expectActions("get nodes", "create nodes")[1].(core.CreateAction).GetObject().(*corev1.Node)
	if created.Status.DeclaredFeatures != nil {
		t.Errorf("declaredFeatures of the node created = %q, want none", created.Status.DeclaredFeatures)
	}

	f = newFixture(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-old"}})
	if err := declaring(f).writeNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	patched := false
	for _, a := range f.actions() {
		if !isStatusPatch(a) {
			continue
		}
		patched = true
		if got, ok := decodePatch(t, a)["status"].(map[string]any)["declaredFeatures"]; ok {
			t.Errorf("status patch's declaredFeatures = %v, want the key left out", got)
		}
	}
	if !patched {
		t.Fatal("no status patch")
	}
}
