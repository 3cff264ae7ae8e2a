package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/errdefs"
)

// ensureNamespace creates the target namespace ns if it does not exist.
func (p *Provider) ensureNamespace(ctx context.Context, ns string) error {
	p.mu.Lock()
	known := p.namespaces[ns]
	p.mu.Unlock()
	if known {
		return nil
	}
	_, err := p.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = p.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:        ns,
			Labels:      map[string]string{LabelOffloadedBy: p.m.offloadedBy},
			Annotations: map[string]string{AnnotationOriginCluster: p.m.clusterID},
		}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("target namespace %s: %w", ns, err)
	}
	p.mu.Lock()
	p.namespaces[ns] = true
	p.mu.Unlock()
	return nil
}

// ensureCopies makes the copies exist with the given data and, if owner is not nil,
// owned by owner. A copy owned by another pod (an earlier incarnation whose garbage
// collection is under way) is replaced rather than adopted.
func (p *Provider) ensureCopies(ctx context.Context, ns string, src *corev1.Pod, copies []depCopy, owner *corev1.Pod) error {
	for _, c := range copies {
		if err := p.ensureCopy(ctx, ns, src, c, owner); err != nil {
			return fmt.Errorf("copy %s/%s of a dependency of %s: %w", ns, c.name, describe(src), err)
		}
	}
	return nil
}

func (p *Provider) ensureCopy(ctx context.Context, ns string, src *corev1.Pod, c depCopy, owner *corev1.Pod) error {
	meta := p.m.ownMeta(src, c.name)
	if owner != nil {
		meta.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID,
		}}
	}
	if c.kind == copySecret {
		s := &corev1.Secret{ObjectMeta: meta, Type: c.secretType, Data: c.data}
		return ensure(ctx, p.m, p.client.CoreV1().Secrets(ns), s, owner,
			func(old, want *corev1.Secret) { old.Data = want.Data })
	}
	text, bin := configMapData(c.data)
	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: text, BinaryData: bin}
	return ensure(ctx, p.m, p.client.CoreV1().ConfigMaps(ns), cm, owner,
		func(old, want *corev1.ConfigMap) { old.Data, old.BinaryData = want.Data, want.BinaryData })
}

// objectClient is the part of a typed client ensure needs.
type objectClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ensure creates want, or updates the existing object of its name to want's data and
// owner. It refuses objects not carrying our label.
func ensure[T interface {
	metav1.Object
	comparable
}](ctx context.Context, m *mapper, c objectClient[T], want T, owner *corev1.Pod, setData func(old, want T)) error {
	old, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if old.GetLabels()[LabelOffloadedBy] != m.offloadedBy {
		return errdefs.InvalidInput("%s exists and was not created by this node", want.GetName())
	}
	stale := old.GetLabels()[LabelOriginUID] != want.GetLabels()[LabelOriginUID]
	for _, r := range old.GetOwnerReferences() {
		if owner == nil || r.UID != owner.UID {
			stale = true
		}
	}
	if stale {
		// Left by an earlier pod of the same name: the garbage collector may be
		// removing it. Replace it instead of racing with the collector.
		uid := old.GetUID()
		err := c.Delete(ctx, old.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return errdefs.Unavailable("%s is being replaced", want.GetName())
		}
		return err
	}
	setData(old, want)
	old.SetOwnerReferences(want.GetOwnerReferences())
	old.SetAnnotations(want.GetAnnotations())
	_, err = c.Update(ctx, old, metav1.UpdateOptions{})
	return err
}
