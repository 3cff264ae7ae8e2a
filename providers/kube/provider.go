package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// originIndex indexes the target pods by the "ns/name" of their source pod.
const originIndex = "origin"

// Provider runs the pods of a virtual node in a target cluster.
type Provider struct {
	cfg      Config
	nodeName string
	m        *mapper
	log      *slog.Logger
	// client talks to the target; restConfig (nil with a fake client) builds the
	// streaming connections of exec, attach and port-forward.
	client     kubernetes.Interface
	restConfig *rest.Config

	// pods is the informer on the target pods carrying our label: the source of
	// GetPod, GetPodStatus, GetPods and notifications.
	pods cache.SharedIndexInformer
	// nodes and allPods feed the capacity (capacity.go).
	nodes     cache.SharedIndexInformer
	allPods   cache.SharedIndexInformer
	informers informerutil.Informers

	mu sync.Mutex
	// records remembers, per source pod key, what we were asked to run: to answer
	// while the informer lags behind a create, to re-create a target pod deleted
	// behind our back, and to tell our own deletions from others'.
	records    map[string]*record
	notify     func(*corev1.Pod)
	namespaces map[string]bool // target namespaces known to exist

	capacity capacityState
	// ctx is New's context: background work (re-creation) stops with it.
	ctx context.Context
	// started is when the provider started: the node's start time in stats.
	started time.Time
	// summaryOf, if set, replaces reading target nodes' stats summaries (tests).
	summaryOf func(ctx context.Context, node string) (*statsv1alpha1.Summary, error)
}

// record is what the provider was last asked for one source pod.
type record struct {
	uid      types.UID
	rp       *provider.ResolvedPod // deep copy
	deleting bool                  // DeletePod was called
	lost     *corev1.PodStatus     // the target pod was deleted by others and not re-created
}

// Option changes a Provider built by New.
type Option func(*Provider)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithHostIP makes hostIP of every pod the virtual node's address.
func WithHostIP(ip string) Option { return func(p *Provider) { p.m.hostIP = ip } }

// WithClient uses client for the target instead of the kubeconfig (tests, with a
// fake clientset): Ping then always succeeds and exec, attach and port-forward,
// which need a REST config, are not implemented.
func WithClient(c kubernetes.Interface) Option { return func(p *Provider) { p.client = c } }

var (
	_ provider.PodLifecycleHandler     = (*Provider)(nil)
	_ provider.ResolvedPodHandler      = (*Provider)(nil)
	_ provider.VolumeUpdater           = (*Provider)(nil)
	_ provider.PodNotifier             = (*Provider)(nil)
	_ provider.NodeProvider            = (*Provider)(nil)
	_ provider.NodeConfigurer          = (*Provider)(nil)
	_ provider.ContainerLogsProvider   = (*Provider)(nil)
	_ provider.ContainerExecProvider   = (*Provider)(nil)
	_ provider.ContainerAttachProvider = (*Provider)(nil)
	_ provider.PortForwardProvider     = (*Provider)(nil)
	_ provider.StatsProvider           = (*Provider)(nil)
)

// New connects to the target cluster and starts the informers, which stop with ctx.
// It does not wait for the target: a target down at start makes the node NotReady
// until it answers.
func New(ctx context.Context, cfg Config, nodeName string, opts ...Option) (*Provider, error) {
	if err := cfg.complete(); err != nil {
		return nil, fmt.Errorf("kube provider config: %w", err)
	}
	p := &Provider{
		cfg:        cfg,
		nodeName:   nodeName,
		m:          newMapper(cfg, nodeName, ""),
		log:        slog.Default(),
		records:    map[string]*record{},
		namespaces: map[string]bool{},
		ctx:        ctx,
		started:    time.Now(),
	}
	for _, opt := range opts {
		opt(p)
	}
	p.log = p.log.With("provider", "kube", "node", nodeName)
	if p.client == nil {
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: cfg.Context}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kube provider: target kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
		rc.UserAgent = "vkubelet-kube-provider/" + nodeName
		p.restConfig = rc
		if p.client, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kube provider: target client: %w", err)
		}
	}
	p.startInformers(ctx)
	return p, nil
}

// CreatePod runs a pod given without resolution: as CreateResolvedPod with nothing
// resolved (volumes then reference empty copies).
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// UpdatePod applies a changed pod; see UpdateResolvedPod.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.UpdateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// CreateResolvedPod creates the target namespace if missing, the copies of the pod's
// dependencies, then the target pod, and makes the pod own the copies. It is
// idempotent by source UID.
func (p *Provider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	src := rp.Pod
	key := providerutil.PodKey(src.Namespace, src.Name)
	p.remember(key, rp)
	if err := p.create(ctx, rp); err != nil {
		return fmt.Errorf("offloading pod %s: %w", key, err)
	}
	return nil
}

func (p *Provider) remember(key string, rp *provider.ResolvedPod) {
	cp := &provider.ResolvedPod{Pod: rp.Pod.DeepCopy(), Env: rp.Env, Volumes: rp.Volumes, PullCredentials: rp.PullCredentials}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.records[key]; r != nil && r.uid == rp.Pod.UID {
		if rp.Env == nil && r.rp != nil {
			cp.Env, cp.Volumes, cp.PullCredentials = r.rp.Env, r.rp.Volumes, r.rp.PullCredentials
		}
		r.rp, r.lost = cp, nil
		return
	}
	p.records[key] = &record{uid: rp.Pod.UID, rp: cp}
}

func (p *Provider) create(ctx context.Context, rp *provider.ResolvedPod) error {
	src := rp.Pod
	tp, copies := p.m.translate(rp)
	pods := p.client.CoreV1().Pods(tp.Namespace)

	existing, err := pods.Get(ctx, tp.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		if p.m.originKey(existing) == "" {
			return errdefs.InvalidInput("target pod %s/%s exists and was not created by this node", tp.Namespace, tp.Name)
		}
		if existing.Labels[LabelOriginUID] != string(src.UID) {
			// An earlier source pod of the same name: make room, and retry later.
			_ = pods.Delete(ctx, existing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
			return errdefs.Unavailable("target pod %s/%s still belongs to an earlier pod %s", tp.Namespace, tp.Name, existing.Labels[LabelOriginUID])
		}
		// Created before (the answer was lost): finish the job.
		return p.ensureCopies(ctx, tp.Namespace, src, copies, existing)
	case !apierrors.IsNotFound(err):
		return err
	}
	if err := p.ensureNamespace(ctx, tp.Namespace); err != nil {
		return err
	}
	err = p.ensureCopies(ctx, tp.Namespace, src, copies, nil)
	var created *corev1.Pod
	if err == nil {
		created, err = pods.Create(ctx, tp, metav1.CreateOptions{})
	}
	if apierrors.IsNotFound(err) {
		// The namespace was deleted since we made it: make it again next time.
		p.mu.Lock()
		delete(p.namespaces, tp.Namespace)
		p.mu.Unlock()
		return errdefs.Unavailable("target namespace %s is gone; retrying: %v", tp.Namespace, err)
	}
	if apierrors.IsAlreadyExists(err) {
		return errdefs.Unavailable("target pod %s/%s created concurrently; retrying", tp.Namespace, tp.Name)
	}
	if err != nil {
		return err
	}
	p.log.Info("offloaded pod", "pod", describe(src), "target", describe(created))
	return p.ensureCopies(ctx, tp.Namespace, src, copies, created)
}

// lastAsked returns the source pod the provider was last asked to run under key
// (CreateResolvedPod, UpdateResolvedPod) if it is the pod of that UID, else nil.
func (p *Provider) lastAsked(key string, uid types.UID) *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.records[key]; r != nil && r.rp != nil && r.uid == uid {
		return r.rp.Pod
	}
	return nil
}

// UpdateResolvedPod applies the source pod's labels, annotations, images, active
// deadline and (unless stripped) tolerations to the target pod.
func (p *Provider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	src := rp.Pod
	key := providerutil.PodKey(src.Namespace, src.Name)
	if last := p.lastAsked(key, src.UID); last != nil {
		// The target pod keeps the resources it was made with: a resize is
		// refused, so that the source pod shows it pending, not made.
		if err := providerutil.RefuseResize("kube", last, src); err != nil {
			return err
		}
	}
	t, err := p.ownTarget(ctx, src)
	if err != nil {
		return err
	}
	p.remember(key, rp)
	want := p.m.targetPod(src)
	t = t.DeepCopy()
	t.Labels, t.Annotations = want.Labels, want.Annotations
	images := map[string]string{}
	for _, c := range src.Spec.Containers {
		images[c.Name] = c.Image
	}
	for _, c := range src.Spec.InitContainers {
		images["init/"+c.Name] = c.Image
	}
	for i := range t.Spec.Containers {
		if img, ok := images[t.Spec.Containers[i].Name]; ok {
			t.Spec.Containers[i].Image = img
		}
	}
	for i := range t.Spec.InitContainers {
		if img, ok := images["init/"+t.Spec.InitContainers[i].Name]; ok {
			t.Spec.InitContainers[i].Image = img
		}
	}
	t.Spec.ActiveDeadlineSeconds = src.Spec.ActiveDeadlineSeconds
	if !p.m.stripTol {
		t.Spec.Tolerations = src.Spec.Tolerations
	}
	if _, err := p.client.CoreV1().Pods(t.Namespace).Update(ctx, t, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsInvalid(err) {
			return errdefs.AsInvalidInput(fmt.Errorf("updating target pod of %s: %w", key, err))
		}
		return fmt.Errorf("updating target pod of %s: %w", key, err)
	}
	return nil
}

// UpdatePodVolumes rewrites the volume copies of the pod with the new files.
func (p *Provider) UpdatePodVolumes(ctx context.Context, rp *provider.ResolvedPod) error {
	src := rp.Pod
	key := providerutil.PodKey(src.Namespace, src.Name)
	t, err := p.ownTarget(ctx, src)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if r := p.records[key]; r != nil && r.uid == src.UID && r.rp != nil {
		cp := *r.rp // r.rp may be in use by a re-creation: replace, never mutate
		cp.Volumes = rp.Volumes
		r.rp = &cp
	}
	p.mu.Unlock()
	_, copies := p.m.translate(&provider.ResolvedPod{Pod: src, Volumes: rp.Volumes})
	if err := p.ensureCopies(ctx, t.Namespace, src, copies, t); err != nil {
		return fmt.Errorf("updating volumes of %s: %w", key, err)
	}
	return nil
}

// ownTarget reads the target pod of src from the API; NotFound if there is none of
// this source pod.
func (p *Provider) ownTarget(ctx context.Context, src *corev1.Pod) (*corev1.Pod, error) {
	ns := p.m.targetNamespace(src.Namespace)
	t, err := p.client.CoreV1().Pods(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (p.m.originKey(t) == "" || t.Labels[LabelOriginUID] != string(src.UID))) {
		return nil, noTarget(describe(src))
	}
	if err != nil {
		return nil, fmt.Errorf("reading target pod of %s: %w", describe(src), err)
	}
	return t, nil
}

// DeletePod deletes the target pod with the source pod's grace period; the
// garbage collector of the target then removes its copies.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	key := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	r := p.records[key]
	if r == nil || r.uid != pod.UID {
		r = &record{uid: pod.UID}
		p.records[key] = r
	}
	r.deleting = true
	p.mu.Unlock()

	t, err := p.ownTarget(ctx, pod)
	if errdefs.IsNotFound(err) {
		p.forgetDeleted(key, pod.UID)
	}
	if err != nil {
		return err
	}
	grace := pod.DeletionGracePeriodSeconds
	if grace == nil {
		grace = pod.Spec.TerminationGracePeriodSeconds
	}
	err = p.client.CoreV1().Pods(t.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{
		GracePeriodSeconds: grace,
		Preconditions:      &metav1.Preconditions{UID: &t.UID},
		PropagationPolicy:  ptr.To(metav1.DeletePropagationBackground),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		p.forgetDeleted(key, pod.UID)
		return noTarget(key)
	}
	if err != nil {
		return fmt.Errorf("deleting target pod of %s: %w", key, err)
	}
	return nil
}

// forgetDeleted drops the record of a deleted pod whose target pod is gone.
func (p *Provider) forgetDeleted(key string, uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.records[key]; r != nil && r.uid == uid && r.deleting {
		delete(p.records, key)
	}
}

// GetPod returns the source pod with the status of its target pod.
func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	key := providerutil.PodKey(namespace, name)
	p.mu.Lock()
	r := p.records[key]
	var last *corev1.Pod
	if r != nil && r.rp != nil {
		last = r.rp.Pod
	}
	p.mu.Unlock()
	if t := p.cached(namespace, name); t != nil {
		if last != nil && string(last.UID) != t.Labels[LabelOriginUID] {
			last = nil
		}
		return p.m.sourcePod(t, last), nil
	}
	if last == nil {
		return nil, noTarget(key)
	}
	st, err := p.GetPodStatus(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	out := last.DeepCopy()
	out.Status = *st
	return out, nil
}

// GetPodStatus returns the status of the target pod from the informer. A pod being
// created (or re-created) that the informer has not seen yet is Pending.
func (p *Provider) GetPodStatus(_ context.Context, namespace, name string) (*corev1.PodStatus, error) {
	if t := p.cached(namespace, name); t != nil {
		return p.m.sourceStatus(t), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.records[providerutil.PodKey(namespace, name)]
	switch {
	case r == nil || r.deleting || r.rp == nil:
		return nil, noTarget(providerutil.PodKey(namespace, name))
	case r.lost != nil:
		return r.lost.DeepCopy(), nil
	default:
		return &corev1.PodStatus{Phase: corev1.PodPending, Reason: "Offloading",
			Message: "the pod is being created in the target cluster"}, nil
	}
}

// GetPods returns every source pod that has a target pod, from the informer.
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	if err := p.synced(ctx); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, o := range p.pods.GetStore().List() {
		t := o.(*corev1.Pod)
		if k := p.m.originKey(t); k != "" {
			out = append(out, p.m.sourcePod(t, p.lastAsked(k, types.UID(t.Labels[LabelOriginUID]))))
		}
	}
	return out, nil
}
