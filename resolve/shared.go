package resolve

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// configMapBytesSharer is implemented by sources that hand out one copy of a
// ConfigMap value's bytes to every pod that mounts it (the Resolver's caches do).
type configMapBytesSharer interface {
	configMapBytes(cm *corev1.ConfigMap, key, value string) []byte
}

// configMapBytes is value as the bytes of a volume file: shared when src can share
// them, else a copy of its own.
func configMapBytes(src source, cm *corev1.ConfigMap, key, value string) []byte {
	if s, ok := src.(configMapBytesSharer); ok {
		return s.configMapBytes(cm, key, value)
	}
	return []byte(value)
}

// sharedConfigMapBytes keeps the bytes of ConfigMap values mounted as files, one
// copy per ConfigMap version and key, for every pod of the node that mounts them.
// A ConfigMap's values are strings and a volume file's contents bytes, so each pod
// would otherwise hold a copy: every pod with a service-account token mounts the
// cluster's CA bundle from kube-root-ca.crt, a kilobyte or more per pod.
// Files are read-only for providers (provider contract), so sharing is safe.
type sharedConfigMapBytes struct {
	mu       sync.Mutex
	byObject map[objectKey]*configMapVersionBytes
}

type configMapVersionBytes struct {
	resourceVersion string
	values          map[string][]byte
}

func (s *sharedConfigMapBytes) get(cm *corev1.ConfigMap, key, value string) []byte {
	o := objectKey{kindConfigMap, cm.Namespace, cm.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.byObject[o]
	if v == nil || v.resourceVersion != cm.ResourceVersion {
		// A new version: its values are new bytes; pods that hold the old ones
		// keep them until they are given the new.
		v = &configMapVersionBytes{resourceVersion: cm.ResourceVersion, values: map[string][]byte{}}
		if s.byObject == nil {
			s.byObject = map[objectKey]*configMapVersionBytes{}
		}
		s.byObject[o] = v
	}
	b, ok := v.values[key]
	if !ok || string(b) != value {
		b = []byte(value)
		v.values[key] = b
	}
	return b
}

// forget drops what is kept for o, when no pod references it any more.
func (s *sharedConfigMapBytes) forget(o objectKey) {
	if o.kind != kindConfigMap {
		return
	}
	s.mu.Lock()
	delete(s.byObject, o)
	s.mu.Unlock()
}
