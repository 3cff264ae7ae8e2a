package kube

import (
	"context"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// startInformers starts, until ctx ends, the informers on the target cluster: our
// pods (by label, indexed by their source pod), whose changes are reported as the
// source pods'; and every pod not terminated and every node, for the free capacity.
func (p *Provider) startInformers(ctx context.Context) {
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	p.pods = coreinformers.NewFilteredPodInformer(p.client, metav1.NamespaceAll, 0, byNamespace,
		func(o *metav1.ListOptions) { o.LabelSelector = p.m.selector() })
	_ = p.pods.AddIndexers(cache.Indexers{originIndex: func(obj any) ([]string, error) {
		if m, ok := obj.(metav1.Object); ok {
			if k := p.m.originKey(m); k != "" {
				return []string{k}, nil
			}
		}
		return nil, nil
	}})
	_, _ = p.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onTargetPod(obj) },
		UpdateFunc: func(_, obj any) { p.onTargetPod(obj) },
		DeleteFunc: p.onTargetPodDeleted,
	})

	p.allPods = coreinformers.NewFilteredPodInformer(p.client, metav1.NamespaceAll, 0, byNamespace,
		func(o *metav1.ListOptions) { o.FieldSelector = "status.phase!=Succeeded,status.phase!=Failed" })
	p.nodes = coreinformers.NewNodeInformer(p.client, 0, byNamespace)
	p.capacity.changed = make(chan struct{}, 1)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.capacityChanged() },
		UpdateFunc: func(any, any) { p.capacityChanged() },
		DeleteFunc: func(any) { p.capacityChanged() },
	}
	_, _ = p.allPods.AddEventHandler(h)
	_, _ = p.nodes.AddEventHandler(h)

	p.informers.Add(p.pods, p.allPods, p.nodes)
	p.informers.Start(ctx.Done())
	go p.runCapacity(ctx)
}

// synced waits (at most until ctx ends or 10s) for the informer on our pods.
func (p *Provider) synced(ctx context.Context) error {
	if p.pods.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), p.pods.HasSynced) {
		return errdefs.Unavailable("kube provider: target pods not listed yet (is the target cluster reachable?)")
	}
	return nil
}

// cached returns our target pod of source pod ns/name from the informer, or nil.
func (p *Provider) cached(ns, name string) *corev1.Pod {
	objs, _ := p.pods.GetIndexer().ByIndex(originIndex, providerutil.PodKey(ns, name))
	for _, o := range objs {
		if t, ok := o.(*corev1.Pod); ok {
			return t
		}
	}
	return nil
}

// NotifyPods registers the status callback and reports every known pod once.
func (p *Provider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = notify
	p.mu.Unlock()
	for _, o := range p.pods.GetStore().List() {
		p.onTargetPod(o)
	}
}

func (p *Provider) callback() func(*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

// ourTarget returns obj as a target pod of ours and the key of its source pod,
// or nil if it is not one.
func (p *Provider) ourTarget(obj any) (*corev1.Pod, string) {
	t, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, ""
	}
	k := p.m.originKey(t)
	if k == "" {
		return nil, ""
	}
	return t, k
}

// onTargetPod reports a changed target pod as its source pod.
func (p *Provider) onTargetPod(obj any) {
	t, k := p.ourTarget(obj)
	if t == nil {
		return
	}
	if notify := p.callback(); notify != nil {
		notify(p.m.sourcePod(t, p.lastAsked(k, types.UID(t.Labels[LabelOriginUID]))))
	}
}

// onTargetPodDeleted handles a target pod gone: the end of our deletion, or a
// deletion by others, after which the pod is re-created unless its restart policy
// is Never (then it is reported Failed).
func (p *Provider) onTargetPodDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, k := p.ourTarget(obj)
	if t == nil {
		return
	}
	src := p.m.sourcePod(t, nil)
	p.mu.Lock()
	r := p.records[k]
	if r != nil && r.uid != src.UID {
		r = nil
	}
	var rp *provider.ResolvedPod
	switch {
	case r == nil || r.deleting:
		// Our deletion finished (or an unknown pod went): report every container
		// terminated, so a waiting deletion completes.
		if r != nil {
			delete(p.records, k)
		}
		src.Status = *deletedStatus(&src.Status)
	case r.rp != nil && r.rp.Pod.Spec.RestartPolicy != corev1.RestartPolicyNever:
		rp = r.rp
	default:
		r.lost = deletedStatus(&src.Status)
		src.Status = *r.lost
	}
	p.mu.Unlock()
	if rp != nil {
		p.log.Warn("target pod deleted behind our back; creating it again", "pod", k)
		go p.recreate(k, rp)
		return
	}
	if notify := p.callback(); notify != nil {
		notify(src)
	}
}

// recreateBackoff paces the retries of recreate: from 500ms, doubling, up to 30s;
// each wait is up to 20% longer at random, so that the pods deleted together
// (a namespace, a node drained in the target) are not all retried together.
var recreateBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// recreate creates the target pod of rp again, retrying while the pod is still
// wanted (not deleted meanwhile).
func (p *Provider) recreate(key string, rp *provider.ResolvedPod) {
	_ = recreateBackoff.DelayFunc().Until(p.ctx, true, true, func(ctx context.Context) (bool, error) {
		p.mu.Lock()
		r := p.records[key]
		wanted := r != nil && r.uid == rp.Pod.UID && !r.deleting
		p.mu.Unlock()
		if !wanted {
			return true, nil
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := p.create(ctx, rp)
		if err != nil {
			p.log.Warn("re-creating target pod failed; retrying", "pod", key, "error", err)
		}
		return err == nil, nil
	})
}
