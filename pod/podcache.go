package pod

import (
	"errors"
	"fmt"
	"hash/fnv"
	"unique"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/compact/podpack"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// cachedPod is what the pod informer keeps of a pod bound to the node: the few
// fields the event handlers and queues look at, and the whole pod packed
// (internal/compact/podpack: its protobuf encoding, compressed against a typical pod's),
// decoded when a handler needs it. A decoded pod takes about 4 KiB of heap, its
// encoding about 1.4 KiB and its packed form a few hundred bytes at most, and a
// node agent holds every pod of its node for the pod's whole life, so the node's
// memory grows by the packed bytes. Unpacking costs microseconds, once per sync.
//
// A cachedPod never changes once made: the informer replaces it on every update.
type cachedPod struct {
	// The few metadata fields the handlers and the informer's bookkeeping read,
	// as fields rather than a whole metav1.ObjectMeta, which is 256 bytes of
	// mostly empty fields per pod.
	Namespace, Name string
	// NodeName is the node the pod is bound to: a Source keeps the pods of
	// many nodes.
	NodeName          string
	UID               types.UID
	ResourceVersion   string
	DeletionTimestamp *metav1.Time
	// statusHash fingerprints the pod's status, so that an update that changed
	// it (ours, or someone else's to correct) is told from one that did not
	// without decoding.
	statusHash uint64
	// specHash fingerprints what a provider may be told of by an update: the
	// pod's spec, labels and annotations. Two incarnations with the same one
	// differ at most in status and bookkeeping metadata, so the sync after our
	// own status write needs neither decoded (sameSpec).
	specHash uint64
	// packed is the pod's encoding, packed (internal/compact/podpack), held in a
	// string (never written, as a string is) for its 8 bytes fewer than a
	// slice's: with them a cachedPod fits the 128-byte size class
	// (TestAPodsStateFitsItsSizeClass).
	packed string
	// terminal is true when the pod's phase is Succeeded or Failed.
	terminal bool
	// ephemeral is true when the pod has ephemeral containers, which a sync
	// handles even when the spec did not change (reportEphemeralNotRun).
	ephemeral bool
}

// packedBytes is packed as the slice podpack reads: read-only.
func (c *cachedPod) packedBytes() []byte {
	return unsafe.Slice(unsafe.StringData(c.packed), len(c.packed))
}

var (
	_ runtime.Object            = &cachedPod{}
	_ metav1.ObjectMetaAccessor = &cachedPod{}
)

// GetObjectMeta is the cachedPod itself, read-only (cachedmeta.go).
func (c *cachedPod) GetObjectMeta() metav1.Object { return c }

// withStatus decodes the pod's status alone, about half the work of the whole
// pod, and returns it in a pod with the cached metadata the status handler and
// writeStatus read (namespace, name, UID, deletion timestamp), its generation,
// and of the spec only what a status check judges by: the readiness gates and
// the active deadline.
func (c *cachedPod) withStatus() (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID,
		ResourceVersion: c.ResourceVersion, DeletionTimestamp: c.DeletionTimestamp}}
	if err := podpack.UnpackEncoded(c.packedBytes(), func(raw []byte) error {
		var err error
		if p.Generation, err = generationIn(raw); err != nil {
			return err
		}
		apiwire.EachField(apiwire.Field(raw, podSpecField), func(num protowire.Number, whole []byte) bool {
			switch num {
			case specReadinessGatesField:
				var g corev1.PodReadinessGate
				if err = g.Unmarshal(apiwire.Value(whole)); err != nil {
					return false
				}
				p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, g)
			case specActiveDeadlineField:
				v, ok := apiwire.Varint(whole)
				if !ok {
					err = errMalformedVarint
				}
				p.Spec.ActiveDeadlineSeconds = ptr.To(int64(v))
			}
			return err == nil
		})
		if err != nil {
			return err
		}
		return p.Status.Unmarshal(apiwire.Field(raw, podStatusField))
	}); err != nil {
		return nil, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	return p, nil
}

// generation is the pod's metadata.generation.
func (c *cachedPod) generation() (int64, error) {
	var gen int64
	err := podpack.UnpackEncoded(c.packedBytes(), func(raw []byte) (err error) {
		gen, err = generationIn(raw)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	return gen, nil
}

var errMalformedVarint = errors.New("malformed varint field")

// generationIn is the metadata.generation of the encoded pod raw.
func generationIn(raw []byte) (gen int64, err error) {
	apiwire.EachField(apiwire.Field(raw, podMetadataField), func(num protowire.Number, whole []byte) bool {
		if num == metaGenerationField {
			v, ok := apiwire.Varint(whole)
			if !ok {
				err = errMalformedVarint
			}
			gen = int64(v)
			return false
		}
		return true
	})
	return gen, err
}

// GetObjectKind implements runtime.Object; a cachedPod is never serialized.
func (c *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. packed is shared: it is never written.
func (c *cachedPod) DeepCopyObject() runtime.Object {
	out := *c
	if c.DeletionTimestamp != nil {
		out.DeletionTimestamp = c.DeletionTimestamp.DeepCopy()
	}
	return &out
}

// pod decodes the whole pod. The result is the caller's.
//
// Its namespace, name and UID are the cachedPod's strings rather than the
// decoder's copies of them: the provider, the resolver and the pod's state keep
// the UID (and the mock the rest) for the pod's life, and with these they keep
// the one copy the cache has, not one more per decode.
func (c *cachedPod) pod() (*corev1.Pod, error) {
	p, err := podpack.Unpack(c.packedBytes())
	if err != nil {
		return nil, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	if p.Namespace == c.Namespace && p.Name == c.Name && p.UID == c.UID {
		p.Namespace, p.Name, p.UID = c.Namespace, c.Name, c.UID
	}
	return p, nil
}

// key is the pod's namespace/name.
func (c *cachedPod) key() string { return c.Namespace + "/" + c.Name }

// compact turns a pod into a cachedPod, without its managed fields, which
// vkubelet never reads.
func compact(p *corev1.Pod) (*cachedPod, error) {
	p.ManagedFields = nil // the informer's freshly decoded object: ours to change
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return cachedFrom(&p.ObjectMeta, raw), nil
}

// cachedFrom makes the cachedPod of a pod from its metadata and its encoding
// (managed fields dropped), which gives the rest: the spec's node name and
// ephemeral containers, the status's phase, both fingerprints and the packed
// pod. Pods read decoded (compact) and encoded (compactRaw) go through it.
func cachedFrom(meta *metav1.ObjectMeta, raw []byte) *cachedPod {
	statusHash, specHash := fingerprints(raw)
	spec, status := apiwire.Field(raw, podSpecField), apiwire.Field(raw, podStatusField)
	phase := corev1.PodPhase(apiwire.Field(status, statusPhaseField))
	return &cachedPod{
		// The namespace and node name are the same in many pods: one copy of
		// each (unique.Make) rather than one per pod.
		Namespace: unique.Make(meta.Namespace).Value(), Name: meta.Name,
		NodeName: unique.Make(string(apiwire.Field(spec, specNodeNameField))).Value(),
		UID:      meta.UID, ResourceVersion: meta.ResourceVersion, DeletionTimestamp: meta.DeletionTimestamp,
		terminal:   phase == corev1.PodSucceeded || phase == corev1.PodFailed,
		statusHash: statusHash,
		specHash:   specHash,
		ephemeral:  apiwire.Field(spec, specEphemeralField) != nil,
		packed:     asString(podpack.PackEncoded(raw)),
	}
}

// asString is b as a string, without a copy: b must never be written again.
func asString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Field numbers in the protobuf encodings of Pod and ObjectMeta (k8s.io/api's
// generated.proto). Their encoding is deterministic: map entries are written
// sorted by key, so equal fields encode to equal bytes.
const (
	podMetadataField            = 1
	podSpecField                = 2
	podStatusField              = 3
	metaGenerationField         = 7
	specContainersField         = 2
	specActiveDeadlineField     = 5
	specInitContainersField     = 20
	specReadinessGatesField     = 28
	containerNameField          = 1 // Container
	containerRestartPolicyField = 24
	containerResourcesField     = 8
	metaLabelsField             = 11
	metaAnnotsField             = 12
	fingerprintSpacing          = 0xff // before the spec, so bytes moved between it and metadata change the hash
)

// statusFingerprint is the status fingerprint of fingerprints alone, for the
// pod the API server answers a status write with.
func statusFingerprint(raw []byte) uint64 {
	h := fnv.New64a()
	apiwire.EachField(raw, func(num protowire.Number, whole []byte) bool {
		if num == podStatusField {
			_, _ = h.Write(apiwire.Value(whole))
		}
		return true
	})
	return h.Sum64()
}

// fingerprints hashes, in one walk over a pod's encoding, its encoded status
// and its encoded spec, labels and annotations (cachedPod's statusHash and
// specHash). Each labels or annotations entry is a field of its own, written
// with its tag, so the hash tells them apart.
func fingerprints(raw []byte) (status, spec uint64) {
	hs, hp := fnv.New64a(), fnv.New64a()
	apiwire.EachField(raw, func(num protowire.Number, whole []byte) bool {
		switch num {
		case podStatusField:
			_, _ = hs.Write(apiwire.Value(whole))
		case podSpecField:
			_, _ = hp.Write([]byte{fingerprintSpacing})
			_, _ = hp.Write(apiwire.Value(whole))
		case podMetadataField:
			apiwire.EachField(apiwire.Value(whole), func(num protowire.Number, whole []byte) bool {
				if num == metaLabelsField || num == metaAnnotsField {
					_, _ = hp.Write(whole)
				}
				return true
			})
		}
		return true
	})
	return hs.Sum64(), hp.Sum64()
}

// compactTransform is the pod informer's transform: every pod it receives,
// read encoded (rawPod) or decoded (a clientset without a REST client of its
// own, client-go's fakes), is stored, and handed to the event handlers, as a
// *cachedPod. Anything else (a tombstone carries an object already
// transformed) passes unchanged.
func compactTransform(obj any) (any, error) {
	switch p := obj.(type) {
	case *rawPod:
		return compactRaw(p), nil
	case *corev1.Pod:
		return compact(p)
	}
	return obj, nil
}

// compactTransformOf is compactTransform for the informer whose cache is store:
// a pod that replaces one of the same UID in it takes the name and UID strings
// of the one it replaces instead of its own copies, so that a pod's status
// writes coming back through the watch do not leave one copy more of them in
// memory each time: the pod's state, its resolution and the provider keep the
// strings of the incarnation they were first handed (cachedPod.pod). The
// informer calls the transform before it stores the pod, so the cache then
// holds the incarnation it replaces, or none if the pod is new.
func compactTransformOf(store cache.Store) cache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := compactTransform(obj)
		cp, ok := obj.(*cachedPod)
		if err != nil || !ok {
			return obj, err
		}
		if old, ok := cachedIn(store, cp.key()); ok && old.UID == cp.UID && old.Name == cp.Name {
			cp.Name, cp.UID = old.Name, old.UID
		}
		return cp, nil
	}
}

// cachedIn returns the cachedPod stored under key, if any.
func cachedIn(store cache.Store, key string) (*cachedPod, bool) {
	obj, exists, err := store.GetByKey(key)
	if err != nil || !exists {
		return nil, false
	}
	cp, ok := obj.(*cachedPod)
	return cp, ok
}

// podCache reads the cachedPods of one node from its informer's cache, or from
// a Source's, which holds other nodes' pods too.
type podCache struct {
	indexer cache.Indexer
	// node, when set, is the node whose pods are read: the cache is a Source's.
	node string
}

// getCached returns the cachedPod of namespace/name, or a NotFound error.
func (pc podCache) getCached(namespace, name string) (*cachedPod, error) {
	obj, exists, err := pc.indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		return nil, fmt.Errorf("pod cache holds a %T for %s/%s", obj, namespace, name)
	}
	if pc.node != "" && cp.NodeName != pc.node {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return cp, nil
}

// get returns the decoded pod namespace/name and its cachedPod, or a NotFound
// error. The pod is the caller's own copy.
func (pc podCache) get(namespace, name string) (*corev1.Pod, *cachedPod, error) {
	cp, err := pc.getCached(namespace, name)
	if err != nil {
		return nil, nil, err
	}
	p, err := cp.pod()
	return p, cp, err
}

// list returns every cachedPod.
func (pc podCache) list() []*cachedPod {
	var objs []any
	if pc.node != "" {
		objs, _ = pc.indexer.ByIndex(byNode, pc.node)
	} else {
		objs = pc.indexer.List()
	}
	out := make([]*cachedPod, 0, len(objs))
	for _, obj := range objs {
		if cp, ok := obj.(*cachedPod); ok {
			out = append(out, cp)
		}
	}
	return out
}
