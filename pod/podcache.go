package pod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

// podCache reads the cachedPods of one node from its informer's cache, or from
// a Source's, which holds other nodes' pods too.
type podCache struct {
	indexer cache.Indexer
	// node, when set, is the node whose pods are read: the cache is a Source's.
	node string
}

// getCached returns the podwire.Pod of namespace/name, or a NotFound error.
func (pc podCache) getCached(namespace, name string) (*podwire.Pod, error) {
	obj, exists, err := pc.indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	cp, ok := obj.(*podwire.Pod)
	if !ok {
		return nil, fmt.Errorf("pod cache holds a %T for %s/%s", obj, namespace, name)
	}
	if pc.node != "" && cp.NodeName != pc.node {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return cp, nil
}

// get returns the decoded pod namespace/name and its podwire.Pod, or a NotFound
// error. The pod is the caller's own copy.
func (pc podCache) get(namespace, name string) (*corev1.Pod, *podwire.Pod, error) {
	cp, err := pc.getCached(namespace, name)
	if err != nil {
		return nil, nil, err
	}
	p, err := cp.Decode()
	return p, cp, err
}

// list returns every podwire.Pod.
func (pc podCache) list() []*podwire.Pod {
	var objs []any
	if pc.node != "" {
		objs, _ = pc.indexer.ByIndex(byNode, pc.node)
	} else {
		objs = pc.indexer.List()
	}
	out := make([]*podwire.Pod, 0, len(objs))
	for _, obj := range objs {
		if cp, ok := obj.(*podwire.Pod); ok {
			out = append(out, cp)
		}
	}
	return out
}
