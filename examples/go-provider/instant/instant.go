// Package instant is a provider whose pods run at once and nowhere: a pod is
// Running, every container ready, as soon as it is created, and gone as soon
// as it is deleted. It keeps its pods in memory only, so a restarted node finds
// none and the API's pods are created again. It shows what a provider is made
// of: the contract (provider.PodLifecycleHandler), status pushed to the node
// (provider.PodNotifier) rather than polled, and the node's capacity from a
// configuration file (provider.NodeConfigurer).
package instant

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/sdk"
)

// Config is the provider's configuration file (--provider-config), JSON:
//
//	{"capacity": {"pods": "500", "cpu": "64", "memory": "256Gi"}}
type Config struct {
	// Capacity is the node's capacity and allocatable; a resource it leaves
	// out keeps its default (1000 pods, 1000 CPUs, 4 TiB of memory).
	Capacity corev1.ResourceList `json:"capacity"`
}

// Provider is the instant provider of one node.
type Provider struct {
	node     string
	hostIP   string
	capacity corev1.ResourceList
	log      *slog.Logger

	mu sync.Mutex
	// pods are the node's pods by namespace/name, with their status.
	pods map[string]*corev1.Pod
	// notify tells the node of a pod's new status; set once by NotifyPods.
	notify func(*corev1.Pod)
}

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.PodNotifier         = (*Provider)(nil)
	_ provider.NodeConfigurer      = (*Provider)(nil)
)

// New builds the provider of cfg.NodeName: sdk.Provider's New.
func New(_ context.Context, cfg sdk.ProviderConfig) (provider.PodLifecycleHandler, error) {
	c := Config{}
	if cfg.ConfigPath != "" {
		b, err := os.ReadFile(cfg.ConfigPath)
		if err != nil {
			return nil, fmt.Errorf("instant: %w", err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("instant: %s: %w", cfg.ConfigPath, err)
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("1000"),
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
	}
	for name, q := range c.Capacity {
		capacity[name] = q
	}
	log := cfg.Logger.With("provider", "instant")
	log.Info("pods run at once and nowhere", "capacity", capacity)
	return &Provider{node: cfg.NodeName, hostIP: cfg.InternalIP, capacity: capacity, log: log,
		pods: map[string]*corev1.Pod{}}, nil
}

// ConfigureNode gives the node its capacity.
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	for name, q := range p.capacity {
		node.Status.Capacity[name] = q
		node.Status.Allocatable[name] = q
	}
}

// NotifyPods keeps the node's callback: CreatePod and DeletePod tell it at once.
func (p *Provider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

// CreatePod runs the pod: it is Running from now on.
func (p *Provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := pod.Namespace + "/" + pod.Name
	p.mu.Lock()
	if had, ok := p.pods[key]; ok && had.UID == pod.UID {
		p.mu.Unlock()
		return nil // created before; the node retries after a lost answer
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: p.hostIP, StartTime: &now, QOSClass: pod.Status.QOSClass}
	if p.hostIP != "" {
		pod.Status.HostIPs = []corev1.HostIP{{IP: p.hostIP}}
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			ContainerID: "instant://" + string(pod.UID) + "/" + c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	p.pods[key] = pod // the node's copy, the provider's from now on
	notify, told := p.notify, pod.DeepCopy()
	p.mu.Unlock()
	p.log.Debug("pod running", "pod", key)
	if notify != nil {
		notify(told) // outside the lock, as the contract asks
	}
	return nil
}

// UpdatePod takes the pod's new spec, labels and annotations; it goes on running.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	key := pod.Namespace + "/" + pod.Name
	p.mu.Lock()
	defer p.mu.Unlock()
	had, ok := p.pods[key]
	if !ok {
		return errdefs.NotFound("instant: pod %s not found", key)
	}
	pod.Status = had.Status
	p.pods[key] = pod
	return nil
}

// DeletePod stops the pod at once, whatever its grace period: its containers
// exit 0, the node is told, and the pod is forgotten.
func (p *Provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	key := pod.Namespace + "/" + pod.Name
	p.mu.Lock()
	had, ok := p.pods[key]
	if !ok {
		p.mu.Unlock()
		return errdefs.NotFound("instant: pod %s not found", key)
	}
	delete(p.pods, key)
	notify := p.notify
	p.mu.Unlock()
	now := metav1.Now()
	for i := range had.Status.ContainerStatuses {
		cs := &had.Status.ContainerStatuses[i]
		started := now
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID}}
		cs.Ready, cs.Started = false, ptr.To(false)
	}
	p.log.Debug("pod stopped", "pod", key)
	if notify != nil {
		notify(had)
	}
	return nil
}

// GetPod returns a copy of the pod.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[namespace+"/"+name]
	if !ok {
		return nil, errdefs.NotFound("instant: pod %s/%s not found", namespace, name)
	}
	return pod.DeepCopy(), nil
}

// GetPodStatus returns a copy of the pod's status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns copies of the node's pods.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}
