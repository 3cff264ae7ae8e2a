package podwire

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// transform is the pod informer's transform: every pod it receives, read
// encoded (RawPod) or decoded (a clientset without a REST client of its own,
// client-go's fakes), is stored, and handed to the event handlers, as a *Pod.
// Anything else (a tombstone carries an object already transformed) passes
// unchanged.
func transform(obj any) (any, error) {
	switch p := obj.(type) {
	case *RawPod:
		return fromRaw(p), nil
	case *corev1.Pod:
		return Compact(p)
	}
	return obj, nil
}

// fromRaw is Compact for a pod received encoded.
func fromRaw(p *RawPod) *Pod { return cachedFrom(&p.ObjectMeta, p.raw) }

// TransformOf is transform for the informer whose cache is store: a pod that
// replaces one of the same UID in it takes the name and UID strings of the one
// it replaces instead of its own copies, so that a pod's status writes coming
// back through the watch do not leave one copy more of them in memory each
// time: the pod's state, its resolution and the provider keep the strings of
// the incarnation they were first handed (Pod.Decode). The informer calls the
// transform before it stores the pod, so the cache then holds the incarnation
// it replaces, or none if the pod is new.
func TransformOf(store cache.Store) cache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := transform(obj)
		cp, ok := obj.(*Pod)
		if err != nil || !ok {
			return obj, err
		}
		if old, ok := cachedIn(store, cp.Key()); ok && old.UID == cp.UID && old.Name == cp.Name {
			cp.Name, cp.UID, cp.keyed = old.Name, old.UID, old.keyed
		}
		return cp, nil
	}
}

// cachedIn returns the Pod stored under key, if any.
func cachedIn(store cache.Store, key string) (*Pod, bool) {
	obj, exists, err := store.GetByKey(key)
	if err != nil || !exists {
		return nil, false
	}
	cp, ok := obj.(*Pod)
	return cp, ok
}
