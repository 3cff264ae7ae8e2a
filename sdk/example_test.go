package sdk_test

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/sdk"
)

// The main of a vkubelet with a provider of its own, "nowhere", beside the
// built-in ones:
//
//	vkubelet-nowhere --provider nowhere --nodename edge-1 --kubeconfig ~/.kube/config
//	vkubelet-nowhere providers   # nowhere, with the built-in ones
//
// examples/go-provider is a complete one, in a module of its own.
func Example() {
	sdk.Main(sdk.Provider{Name: "nowhere", New: newNowhere})
}

// nowhere runs its pods nowhere: each is Running as soon as it is created, and
// gone as soon as it is deleted. It pushes no notifications, so the node polls
// GetPodStatus (--status-poll-interval).
type nowhere struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod // by namespace/name, with their status
}

func newNowhere(_ context.Context, cfg sdk.ProviderConfig) (provider.PodLifecycleHandler, error) {
	cfg.Logger.Info("pods run nowhere", "node", cfg.NodeName)
	return &nowhere{pods: map[string]*corev1.Pod{}}, nil
}

func (n *nowhere) CreatePod(_ context.Context, pod *corev1.Pod) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	if had, ok := n.pods[key]; ok && had.UID == pod.UID {
		return nil // created before: the node retries after a restart or a lost answer
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	n.pods[key] = pod // the node handed over a copy: it is the provider's
	return nil
}

func (n *nowhere) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	had, ok := n.pods[pod.Namespace+"/"+pod.Name]
	if !ok {
		return errdefs.NotFound("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	pod.Status = had.Status
	n.pods[pod.Namespace+"/"+pod.Name] = pod
	return nil
}

func (n *nowhere) DeletePod(_ context.Context, pod *corev1.Pod) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.pods[pod.Namespace+"/"+pod.Name]; !ok {
		return errdefs.NotFound("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	delete(n.pods, pod.Namespace+"/"+pod.Name)
	return nil
}

func (n *nowhere) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pod, ok := n.pods[namespace+"/"+name]
	if !ok {
		return nil, errdefs.NotFound("pod %s/%s not found", namespace, name)
	}
	return pod.DeepCopy(), nil // the caller's from now on
}

func (n *nowhere) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := n.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

func (n *nowhere) GetPods(context.Context) ([]*corev1.Pod, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(n.pods))
	for _, pod := range n.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}
