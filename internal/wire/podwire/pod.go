package podwire

import (
	"errors"
	"fmt"
	"hash/fnv"
	"unique"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/compact/podpack"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// Pod is what the pod informer keeps of a pod bound to the node: the few
// fields the event handlers and queues look at, and the whole pod packed
// (internal/compact/podpack: its protobuf encoding, compressed against a typical pod's),
// decoded when a handler needs it. A decoded pod takes about 4 KiB of heap, its
// encoding about 1.4 KiB and its packed form a few hundred bytes at most, and a
// node agent holds every pod of its node for the pod's whole life, so the node's
// memory grows by the packed bytes. Unpacking costs microseconds, once per sync.
//
// A Pod never changes once made: the informer replaces it on every update.
// Make one with Compact, or through the informer's TransformOf.
type Pod struct {
	// The few metadata fields the handlers and the informer's bookkeeping read,
	// as fields rather than a whole metav1.ObjectMeta, which is 256 bytes of
	// mostly empty fields per pod. Read-only.
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
	// own status write needs neither decoded.
	specHash uint64
	// packed is the pod's encoding, packed (internal/compact/podpack), held in a
	// string (never written, as a string is) for its 8 bytes fewer than a
	// slice's: with them a Pod fits the 128-byte size class
	// (TestAPodFitsItsSizeClass).
	packed string
	// terminal is true when the pod's phase is Succeeded or Failed.
	terminal bool
	// ephemeral is true when the pod has ephemeral containers.
	ephemeral bool
	// keyed is true when Name is the end of the pod's key, one string
	// "namespace/name" (see Key).
	keyed bool
}

// StatusHash fingerprints the pod's encoded status: two Pods with the same
// one have the same status. Pods from the informer and the answers to
// Client.PatchStatus have comparable ones.
func (c *Pod) StatusHash() uint64 { return c.statusHash }

// SpecHash fingerprints the pod's encoded spec, labels and annotations: what a
// provider may be told of by an update. Two incarnations with the same one
// differ at most in status and bookkeeping metadata.
func (c *Pod) SpecHash() uint64 { return c.specHash }

// Terminal reports whether the pod's phase is Succeeded or Failed.
func (c *Pod) Terminal() bool { return c.terminal }

// HasEphemeralContainers reports whether the pod's spec has ephemeral
// containers.
func (c *Pod) HasEphemeralContainers() bool { return c.ephemeral }

// Key is the pod's namespace/name. A Pod's name is the end of one string
// that holds its key (cachedFrom), so the key costs no bytes of its own: the
// informer's events hand it to the queues, and the controller keeps it as the
// pod's state's key, where each pod kept a copy of 48 bytes more.
func (c *Pod) Key() string {
	if !c.keyed {
		return c.Namespace + "/" + c.Name
	}
	// Name is key[len(Namespace)+1:] (cachedFrom, and never written after:
	// a Pod is read-only), so the key starts that many bytes before it, in
	// the same allocation.
	n := len(c.Namespace) + 1
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(c.Name)), -n)), n+len(c.Name))
}

// keyed returns namespace and name as parts of one string namespace/name: the
// namespace one copy for all pods (unique.Make), the name the end of the key.
func keyed(namespace, name string) (ns, nm string, ok bool) {
	ns = unique.Make(namespace).Value()
	if name == "" {
		// An empty name's string may point anywhere: Key could not find
		// the key from it.
		return ns, name, false
	}
	key := ns + "/" + name
	return ns, key[len(ns)+1:], true
}

// packedBytes is packed as the slice podpack reads: read-only.
func (c *Pod) packedBytes() []byte {
	return unsafe.Slice(unsafe.StringData(c.packed), len(c.packed))
}

var (
	_ runtime.Object            = &Pod{}
	_ metav1.ObjectMetaAccessor = &Pod{}
)

// GetObjectMeta is the Pod itself, read-only (meta.go).
func (c *Pod) GetObjectMeta() metav1.Object { return c }

// GetObjectKind implements runtime.Object; a Pod is never serialized.
func (c *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. packed is shared: it is never written.
func (c *Pod) DeepCopyObject() runtime.Object {
	out := *c
	if c.DeletionTimestamp != nil {
		out.DeletionTimestamp = c.DeletionTimestamp.DeepCopy()
	}
	return &out
}

// Decode decodes the whole pod. The result is the caller's.
//
// Its namespace, name and UID are the Pod's strings rather than the
// decoder's copies of them: the provider, the resolver and the pod's state keep
// the UID (and the mock the rest) for the pod's life, and with these they keep
// the one copy the cache has, not one more per decode.
func (c *Pod) Decode() (*corev1.Pod, error) {
	p, err := podpack.Unpack(c.packedBytes())
	if err != nil {
		return nil, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	if p.Namespace == c.Namespace && p.Name == c.Name && p.UID == c.UID {
		p.Namespace, p.Name, p.UID = c.Namespace, c.Name, c.UID
	}
	return p, nil
}

// WithStatus decodes the pod's status alone, about half the work of the whole
// pod, and returns it in a pod with the cached metadata the status handler and
// its write read (namespace, name, UID, deletion timestamp), its generation,
// and of the spec only what a status check judges by: the readiness gates and
// the active deadline.
func (c *Pod) WithStatus() (*corev1.Pod, error) {
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

// Generation is the pod's metadata.generation.
func (c *Pod) Generation() (int64, error) {
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

// Containers are the names of a pod's containers, as a status judges them.
type Containers struct {
	App, Init []string
	// Sidecars are the init containers that keep running (restartPolicy
	// Always); nil if there are none.
	Sidecars map[string]bool
}

// Containers reads the names of the pod's app and init containers, and which
// init containers are sidecars, from its encoding.
func (c *Pod) Containers() (Containers, error) {
	var of Containers
	err := podpack.UnpackEncoded(c.packedBytes(), func(raw []byte) error {
		return apiwire.Walk(apiwire.Field(raw, podSpecField), func(num protowire.Number, whole []byte) error {
			if num != specContainersField && num != specInitContainersField {
				return nil
			}
			ctr := apiwire.Value(whole)
			name := string(apiwire.Field(ctr, containerNameField))
			if num == specContainersField {
				of.App = append(of.App, name)
				return nil
			}
			of.Init = append(of.Init, name)
			if corev1.ContainerRestartPolicy(apiwire.Field(ctr, containerRestartPolicyField)) == corev1.ContainerRestartPolicyAlways {
				if of.Sidecars == nil {
					of.Sidecars = map[string]bool{}
				}
				of.Sidecars[name] = true
			}
			return nil
		})
	})
	if err != nil {
		return Containers{}, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	return of, nil
}

// ResourcesSpec decodes, of the pod's spec, only its resources: the pod-level
// ones and its containers' names, resources and restart policies (which make
// an init container a sidecar, whose requests add up rather than overlap):
// what the status of a provider that resizes in place reports.
func (c *Pod) ResourcesSpec() (*corev1.PodSpec, error) {
	spec := &corev1.PodSpec{}
	err := podpack.UnpackEncoded(c.packedBytes(), func(raw []byte) error {
		return apiwire.Walk(apiwire.Field(raw, podSpecField), func(num protowire.Number, whole []byte) error {
			if num == specResourcesField {
				spec.Resources = &corev1.ResourceRequirements{}
				return spec.Resources.Unmarshal(apiwire.Value(whole))
			}
			if num != specContainersField && num != specInitContainersField {
				return nil
			}
			ctr := apiwire.Value(whole)
			out := corev1.Container{Name: string(apiwire.Field(ctr, containerNameField))}
			if err := out.Resources.Unmarshal(apiwire.Field(ctr, containerResourcesField)); err != nil {
				return err
			}
			if rp := apiwire.Field(ctr, containerRestartPolicyField); rp != nil {
				policy := corev1.ContainerRestartPolicy(rp)
				out.RestartPolicy = &policy
			}
			if num == specContainersField {
				spec.Containers = append(spec.Containers, out)
			} else {
				spec.InitContainers = append(spec.InitContainers, out)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cached pod %s/%s: %w", c.Namespace, c.Name, err)
	}
	return spec, nil
}

// Compact turns a pod into a Pod, without its managed fields, which the node
// never reads. It clears p's managed fields: p must be the caller's to change.
func Compact(p *corev1.Pod) (*Pod, error) {
	p.ManagedFields = nil // the informer's freshly decoded object: ours to change
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return cachedFrom(&p.ObjectMeta, raw), nil
}

// cachedFrom makes the Pod of a pod from its metadata and its encoding
// (managed fields dropped), which gives the rest: the spec's node name and
// ephemeral containers, the status's phase, both fingerprints and the packed
// pod. Pods read decoded (Compact) and encoded (fromRaw) go through it.
func cachedFrom(meta *metav1.ObjectMeta, raw []byte) *Pod {
	statusHash, specHash := fingerprints(raw)
	spec, status := apiwire.Field(raw, podSpecField), apiwire.Field(raw, podStatusField)
	phase := corev1.PodPhase(apiwire.Field(status, statusPhaseField))
	namespace, name, isKeyed := keyed(meta.Namespace, meta.Name)
	return &Pod{
		// The namespace and node name are the same in many pods: one copy of
		// each (unique.Make) rather than one per pod.
		Namespace: namespace, Name: name, keyed: isKeyed,
		NodeName: unique.Make(string(apiwire.Field(spec, specNodeNameField))).Value(),
		UID:      meta.UID, ResourceVersion: meta.ResourceVersion, DeletionTimestamp: meta.DeletionTimestamp,
		terminal:   phase == corev1.PodSucceeded || phase == corev1.PodFailed,
		statusHash: statusHash,
		specHash:   specHash,
		ephemeral:  apiwire.Field(spec, specEphemeralField) != nil,
		packed:     asString(podpack.PackEncoded(raw)),
	}
}

// Undecodable is a copy of c whose pod cannot be decoded, for the tests of a
// caller that must not decode it: every other field is c's.
func Undecodable(c *Pod) *Pod {
	out := *c
	out.packed = "not a packed pod"
	return &out
}

// asString is b as a string, without a copy: b must never be written again.
func asString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// fingerprintSpacing is written before the spec, so that bytes moved between
// it and the metadata change the spec's hash.
const fingerprintSpacing = 0xff

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
// and its encoded spec, labels and annotations (Pod's statusHash and
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
				if num == metaLabelsField || num == metaAnnotationsField {
					_, _ = hp.Write(whole)
				}
				return true
			})
		}
		return true
	})
	return hs.Sum64(), hp.Sum64()
}
