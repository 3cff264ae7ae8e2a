package pod_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// A pod resized in place through the resize subresource: the provider gets the
// new resources, and the container's status says they are in effect.
func TestAResizedPodShowsTheResourcesItRunsWith(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.InPlaceResize)
	prov := newMock(t, "")
	c, node := startController(t, prov)
	withAllocatable(t, c, node)
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, appPod("grows", withCPU("100m")))
	waitRunning(t, c, ns, "grows")

	resize(t, c, ns, "grows", "200m")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := prov.GetPod(context.Background(), ns, "grows")
		if err != nil {
			return false, err.Error()
		}
		return cpuOf(got.Spec.Containers[0].Resources) == "200m", fmt.Sprintf("the provider runs %s", cpuOf(got.Spec.Containers[0].Resources))
	})
	waitResources(t, c, ns, "grows", "200m", func(p *corev1.Pod) (bool, string) {
		pending := podCondition(p, corev1.PodResizePending)
		return pending.Type == "", fmt.Sprintf("PodResizePending %+v", pending)
	})
}

// A provider that cannot resize refuses: the pod shows PodResizePending,
// Infeasible, with the provider's words and a Warning Event, keeps running with
// its resources, and still gets its other changes with them; the resize is not
// asked again, and once the spec goes back to what runs, nothing is pending.
func TestAResizeTheProviderRefusesIsInfeasible(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.InPlaceResize)
	testenv.RequireAPIFeature(t, apifeatures.PodObservedGeneration) // the condition's observedGeneration
	m := newMock(t, "")
	prov := &refusesResize{Provider: m}
	c, node := startController(t, prov)
	withAllocatable(t, c, node)
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, appPod("fixed", withCPU("100m")))
	waitRunning(t, c, ns, "fixed")

	resize(t, c, ns, "fixed", "300m")
	waitResources(t, c, ns, "fixed", "100m", func(p *corev1.Pod) (bool, string) {
		pending := podCondition(p, corev1.PodResizePending)
		return pending.Status == corev1.ConditionTrue && pending.Reason == corev1.PodReasonInfeasible &&
				pending.Message == "this back end cannot resize a running pod" && pending.ObservedGeneration == p.Generation,
			fmt.Sprintf("PodResizePending %+v (generation %d)", pending, p.Generation)
	})
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		events, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=fixed,reason=" + pod.ReasonResizeInfeasible})
		if err != nil {
			t.Fatal(err)
		}
		return len(events.Items) == 1 && events.Items[0].Type == corev1.EventTypeWarning,
			fmt.Sprintf("%d ResizeInfeasible Events, want one Warning", len(events.Items))
	})

	// A label change reaches the provider, with the resources that run.
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), "fixed", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"tier":"gold"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := m.GetPod(context.Background(), ns, "fixed")
		if err != nil {
			return false, err.Error()
		}
		return got.Labels["tier"] == "gold" && cpuOf(got.Spec.Containers[0].Resources) == "100m",
			fmt.Sprintf("the provider has labels %v, cpu %s", got.Labels, cpuOf(got.Spec.Containers[0].Resources))
	})
	if n := prov.refusals(); n != 1 {
		t.Errorf("the provider was asked the refused resize %d times, want once", n)
	}

	// Back to what runs: nothing is pending.
	resize(t, c, ns, "fixed", "100m")
	waitResources(t, c, ns, "fixed", "100m", func(p *corev1.Pod) (bool, string) {
		pending := podCondition(p, corev1.PodResizePending)
		return pending.Type == "", fmt.Sprintf("PodResizePending %+v", pending)
	})
}

// refusesResize is the mock, refusing any change of a pod's resources as a
// back end that cannot resize does.
type refusesResize struct {
	*mock.Provider
	n atomic.Int32 // resizes refused
}

func (r *refusesResize) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	running, err := r.GetPod(ctx, rp.Pod.Namespace, rp.Pod.Name)
	if err != nil {
		return err
	}
	if !equality.Semantic.DeepEqual(running.Spec.Containers[0].Resources, rp.Pod.Spec.Containers[0].Resources) {
		r.n.Add(1)
		return errdefs.InvalidInput("this back end cannot resize a running pod")
	}
	return r.Provider.UpdateResolvedPod(ctx, rp)
}

func (r *refusesResize) refusals() int32 { return r.n.Load() }

// withAllocatable gives the test's node room for the resizes: the API server
// refuses one the node's allocatable resources cannot hold.
func withAllocatable(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	// Others write the node too (its Lease holder, the node lifecycle
	// controller): retried on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}
		n.Status.Allocatable = n.Status.Capacity
		_, err = c.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func withCPU(cpu string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
}

func cpuOf(r corev1.ResourceRequirements) string {
	q := r.Requests[corev1.ResourceCPU]
	return q.String()
}

// resize asks for cpu through the pod's resize subresource, as
// `kubectl patch --subresource resize` does.
func resize(t *testing.T, c kubernetes.Interface, ns, name, cpu string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":%q}}}]}}`, cpu)
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
}

// waitResources waits until the pod's container status shows cpu allocated and
// in effect, and ok holds.
func waitResources(t *testing.T, c kubernetes.Interface, ns, name, cpu string, ok func(*corev1.Pod) (bool, string)) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p := getPod(t, c, ns, name)
		if len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("container statuses %+v", p.Status.ContainerStatuses)
		}
		cs := p.Status.ContainerStatuses[0]
		allocated := cs.AllocatedResources[corev1.ResourceCPU]
		if cs.Resources == nil || cpuOf(*cs.Resources) != cpu || allocated.String() != cpu {
			return false, fmt.Sprintf("container status resources %v, allocated %v; want cpu %s", cs.Resources, cs.AllocatedResources, cpu)
		}
		return ok(p)
	})
}

// A provider that does not resize in place gets no resources in its pods'
// statuses, so the API server refuses to resize their running pods, with its
// own words, as for a kubelet without the feature.
func TestAPodOfAProviderThatCannotResizeIsNotResized(t *testing.T) {
	testenv.RequireAPIFeature(t, apifeatures.InPlaceResize)
	prov := newMock(t, "")
	c, node := startController(t, plainProvider{prov})
	withAllocatable(t, c, node)
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, appPod("plain", withCPU("100m")))
	waitRunning(t, c, ns, "plain")
	if cs := getPod(t, c, ns, "plain").Status.ContainerStatuses; len(cs) != 1 || cs[0].Resources != nil {
		t.Fatalf("container statuses %+v; want one without resources", cs)
	}
	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"200m"}}}]}}`
	_, err := c.CoreV1().Pods(ns).Patch(context.Background(), "plain", types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{}, "resize")
	if err == nil || !strings.Contains(err.Error(), "without support for resize") {
		t.Errorf("resize: %v; want the API server's refusal of a node without support for resize", err)
	}
}

// A pod with pod-level resources (spec.resources): its status says what the
// pod as a whole runs with, as the kubelet's does (allocatedResources the
// pod's requests, resources the pod-level requirements), and a resize of them
// through the resize subresource reaches the provider and then the status.
func TestPodLevelResourcesAreReportedAndResized(t *testing.T) {
	// v1.34's API server has neither field (unknown field); v1.35's drops both
	// with its alpha gate off, and the node, which knows, writes neither.
	testenv.RequireAPIFeature(t, apifeatures.PodLevelResourcesStatus)
	prov := newMock(t, "")
	c, node := startController(t, prov)
	withAllocatable(t, c, node)
	ns := testenv.Namespace(t)
	podLevel := func(req, lim string) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim)},
		}
	}
	// The API server lets a client resize pod-level resources only on a node
	// that declares the feature; the node controller, which is not under test
	// here, declares its provider's.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.DeclaredFeatures = []string{"InPlacePodLevelResourcesVerticalScaling"}
		_, err = c.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	createPod(t, c, ns, node, appPod("whole", func(s *corev1.PodSpec) { s.Resources = podLevel("100m", "200m") }))
	waitRunning(t, c, ns, "whole")
	waitPodLevel := func(req, lim string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			st := getPod(t, c, ns, "whole").Status
			allocated := st.AllocatedResources[corev1.ResourceCPU]
			if st.Resources == nil {
				return false, fmt.Sprintf("status.resources nil, allocatedResources %v", st.AllocatedResources)
			}
			limit := st.Resources.Limits[corev1.ResourceCPU]
			return allocated.String() == req && cpuOf(*st.Resources) == req && limit.String() == lim,
				fmt.Sprintf("status allocatedResources %v, resources %v; want cpu %s, limit %s", st.AllocatedResources, st.Resources, req, lim)
		})
	}
	waitPodLevel("100m", "200m")

	patch := `{"spec":{"resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m"}}}}`
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), "whole", types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := prov.GetPod(context.Background(), ns, "whole")
		if err != nil {
			return false, err.Error()
		}
		if got.Spec.Resources == nil {
			return false, "the provider's pod has no pod-level resources"
		}
		return cpuOf(*got.Spec.Resources) == "150m", fmt.Sprintf("the provider runs the pod with %s", cpuOf(*got.Spec.Resources))
	})
	waitPodLevel("150m", "300m")
}
