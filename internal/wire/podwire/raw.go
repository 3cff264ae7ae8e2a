package podwire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// The pod watch reads pods as the API server encoded them, not decoded.
//
// The informer keeps each pod as a Pod, whose packed form is the pod's
// protobuf encoding compressed. Through client-go's typed client every watch
// event was decoded into a corev1.Pod and then encoded again to be packed: both
// for an object of which the cache reads six fields. A node agent's busiest
// path is that watch (every create, status write and delete of its pods comes
// back through it), and the two steps were about a tenth of its CPU under load.
//
// So the pod informer lists and watches through a REST client whose decoder
// turns a protobuf Pod into a RawPod: its metadata decoded (which the
// informer's bookkeeping reads: name, namespace, resourceVersion, and the
// annotations of the bookmark that ends a streamed list), the rest left as
// bytes. Managed fields are dropped from the bytes on the way, as they were
// from the decoded pod. Everything else (Status objects of errors, other
// kinds) is decoded as before.

// RawPod is a pod as the pod informer receives it: its metadata decoded,
// without labels, owner references, finalizers and managed fields (no one
// reads them before TransformOf makes it a Pod), and its whole protobuf
// encoding, without managed fields.
type RawPod struct {
	metav1.ObjectMeta
	raw []byte
}

// GetObjectKind implements runtime.Object; a RawPod is never serialized.
func (p *RawPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *RawPod) DeepCopyObject() runtime.Object {
	return &RawPod{ObjectMeta: *p.ObjectMeta.DeepCopy(), raw: append([]byte(nil), p.raw...)}
}

// RawPodList is a PodList of RawPods.
type RawPodList struct {
	metav1.ListMeta
	Items []RawPod
}

// GetObjectKind implements runtime.Object; a RawPodList is never serialized.
func (l *RawPodList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (l *RawPodList) DeepCopyObject() runtime.Object {
	out := &RawPodList{ListMeta: *l.ListMeta.DeepCopy(), Items: make([]RawPod, len(l.Items))}
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*RawPod)
	}
	return out
}

// rawPodDecoder decodes protobuf Pods and PodLists into RawPods and
// rawPodLists, and anything else with next.
type rawPodDecoder struct {
	runtime.Serializer // next: the standard protobuf serializer
}

func (d rawPodDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	kindBytes, raw, ok := apiwire.Envelope(data)
	var kind string // a constant: no string made per event
	switch string(kindBytes) {
	case "Pod":
		kind = "Pod"
	case "PodList":
		kind = "PodList"
	}
	if !ok || kind == "" {
		return d.Serializer.Decode(data, defaults, into)
	}
	gvk := &schema.GroupVersionKind{Version: "v1", Kind: kind}
	if kind == "Pod" {
		p, ok := into.(*RawPod)
		if !ok {
			p = &RawPod{}
		}
		if err := p.Unmarshal(raw); err != nil {
			return nil, gvk, err
		}
		return p, gvk, nil
	}
	l, ok := into.(*RawPodList)
	if !ok {
		l = &RawPodList{}
	}
	*l = RawPodList{}
	err := apiwire.Walk(raw, func(num protowire.Number, whole []byte) error {
		if (num == listMetadataField || num == listItemsField) && !apiwire.IsBytes(whole) {
			return fmt.Errorf("field %d is not length-delimited", num)
		}
		switch num {
		case listMetadataField:
			return l.ListMeta.Unmarshal(apiwire.Value(whole))
		case listItemsField:
			l.Items = append(l.Items, RawPod{})
			return l.Items[len(l.Items)-1].Unmarshal(apiwire.Value(whole))
		}
		return nil
	})
	if err != nil {
		return nil, gvk, fmt.Errorf("decoding a PodList: %w", err)
	}
	return l, gvk, nil
}

// watchEventDecoder decodes the frames of the pod watch, WatchEvents, without
// copying the object in them: the event's Object.Raw is part of the frame.
// client-go's watch decoder decodes that object at once (a RawPod copies what it
// keeps, any other kind is unmarshalled), before it reads the next frame into
// the same buffer, so nothing refers to the frame past that. The standard
// decoder copied every event's pod, managed fields included, only for the copy
// to be dropped: about 5 KiB per event. Anything but a WatchEvent is decoded by
// next.
type watchEventDecoder struct {
	runtime.Serializer // next: the standard protobuf stream serializer
}

func (d watchEventDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{}
	// Read as the generated decoder reads it: a field met twice takes its last
	// value, and a known field of the wrong wire type is an error.
	err := apiwire.Walk(data, func(num protowire.Number, whole []byte) error {
		switch num {
		case watchEventTypeField:
			if !apiwire.IsBytes(whole) {
				return fmt.Errorf("the event's type is not length-delimited")
			}
			ev.Type = eventType(apiwire.Value(whole))
		case watchEventObjectField:
			if !apiwire.IsBytes(whole) {
				return fmt.Errorf("the event's object is not length-delimited")
			}
			return apiwire.Walk(apiwire.Value(whole), func(num protowire.Number, whole []byte) error {
				if num != rawExtensionRawField {
					return nil
				}
				if !apiwire.IsBytes(whole) {
					return fmt.Errorf("the event's object is not length-delimited")
				}
				ev.Object.Raw = apiwire.Value(whole)
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading a watch event: %w", err)
	}
	return ev, &schema.GroupVersionKind{Group: "meta.k8s.io", Version: "v1", Kind: "WatchEvent"}, nil
}

// eventType is t as a string, one of the constants for the known types: no
// string made per event.
func eventType(t []byte) string {
	for _, known := range [...]watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(t) == string(known) {
			return string(known)
		}
	}
	return string(t)
}

// NodeName is the node the pod is bound to, its spec.nodeName.
func (p *RawPod) NodeName() string {
	return string(apiwire.Field(apiwire.Field(p.raw, podSpecField), specNodeNameField))
}

// Unmarshal sets p from the encoding of a Pod: a copy of it without managed
// fields, and the metadata the informer reads.
//
// Every event of the pod watch comes through here, so the copy is made in one
// allocation of its final size: a first walk measures it (the watch's frame is
// reused for the next event, so a copy there must be).
func (p *RawPod) Unmarshal(pod []byte) error {
	*p = RawPod{}
	size, lightSize := 0, 0
	var kepts []int // what is kept of each metadata field (one, from the API server)
	err := apiwire.Walk(pod, func(num protowire.Number, whole []byte) error {
		if num != podMetadataField {
			size += len(whole)
			return nil
		}
		if !apiwire.IsBytes(whole) {
			return fmt.Errorf("the pod's metadata is not length-delimited")
		}
		kept, light, err := metadataSizes(apiwire.Value(whole))
		size += protowire.SizeTag(podMetadataField) + protowire.SizeBytes(kept)
		lightSize += light
		kepts = append(kepts, kept)
		return err
	})
	if err != nil {
		return fmt.Errorf("reading a pod's encoding: %w", err)
	}
	out := make([]byte, 0, size)
	light := make([]byte, 0, lightSize) // the metadata fields ObjectMeta is decoded from
	_ = apiwire.Walk(pod, func(num protowire.Number, whole []byte) error {
		if num != podMetadataField {
			out = append(out, whole...)
			return nil
		}
		out = protowire.AppendTag(out, podMetadataField, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(kepts[0]))
		kepts = kepts[1:]
		return apiwire.Walk(apiwire.Value(whole), func(num protowire.Number, whole []byte) error {
			switch num {
			case metaManagedFieldsField:
			case metaLabelsField, metaOwnerRefsField, metaFinalizersField:
				out = append(out, whole...)
			default:
				out = append(out, whole...)
				light = append(light, whole...)
			}
			return nil
		})
	})
	if err := p.ObjectMeta.Unmarshal(light); err != nil {
		return fmt.Errorf("decoding a pod's metadata: %w", err)
	}
	p.raw = out
	return nil
}

// metadataSizes measures what Unmarshal keeps of a pod's metadata: its fields
// but managed fields (kept), and of those the ones ObjectMeta is decoded from
// (light).
func metadataSizes(meta []byte) (kept, light int, err error) {
	err = apiwire.Walk(meta, func(num protowire.Number, whole []byte) error {
		switch num {
		case metaManagedFieldsField:
			// Not read, but not taken whatever its form: an entry is a message.
			if !apiwire.IsBytes(whole) {
				return fmt.Errorf("a managed fields entry is not length-delimited")
			}
		case metaLabelsField, metaOwnerRefsField, metaFinalizersField:
			kept += len(whole)
		default:
			kept += len(whole)
			light += len(whole)
		}
		return nil
	})
	return kept, light, err
}
