package apifeatures_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{})
}

// The rule is checked against the release it judges: for each feature, the
// control plane's API server ($VKUBELET_KUBERNETES_VERSION, else the default
// release) keeps the field the node would write exactly when Detect says it
// has the feature. A feature the rule calls off that the server keeps would
// be one the node does without for nothing; one it calls on that the server
// drops, a silent difference.
func TestWhatDetectSaysIsWhatTheServerKeeps(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client(t)
	s, err := apifeatures.Detect(ctx, c.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	if want := controlplane.SelectedKubernetesVersion(); s.Version != want {
		t.Errorf("Version = %q, want the control plane's %s", s.Version, want)
	}
	for _, o := range s.Off() {
		t.Logf("off: %s: %s", o.Feature, o.Why)
	}

	ns := testenv.Namespace(t)
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{NodeName: "apifeatures-absent-node", Containers: []corev1.Container{{Name: "app", Image: "img",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One status write with every field the node may write, as a merge patch
	// whose fields a release that lacks them drops (with a warning if it does
	// not know them at all).
	patch := `{"status":{"phase":"Running","observedGeneration":1,
		"conditions":[{"type":"example.com/Probe","status":"True","observedGeneration":1}],
		"allocatedResources":{"cpu":"100m"},"resources":{"requests":{"cpu":"100m"}},
		"containerStatuses":[{"name":"app","image":"img","imageID":"","ready":false,"restartCount":0,
			"state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}},
			"allocatedResources":{"cpu":"100m"},"resources":{"requests":{"cpu":"100m"}}}]}}`
	p, err = c.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	kept := map[apifeatures.Feature]bool{
		apifeatures.PodObservedGeneration:   p.Status.ObservedGeneration == 1 && len(p.Status.Conditions) == 1 && p.Status.Conditions[0].ObservedGeneration == 1,
		apifeatures.PodLevelResourcesStatus: p.Status.AllocatedResources != nil && p.Status.Resources != nil,
		apifeatures.InPlaceResize: len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].AllocatedResources != nil && p.Status.ContainerStatuses[0].Resources != nil,
	}

	node, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "apifeatures-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	node, err = c.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"status":{"declaredFeatures":["Probe"]}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	kept[apifeatures.NodeDeclaredFeatures] = len(node.Status.DeclaredFeatures) == 1

	for f, kept := range kept {
		if s.Has(f) != kept {
			t.Errorf("%s: Detect says the server has it: %v; the server kept the field written: %v", f, s.Has(f), kept)
		}
	}
}
