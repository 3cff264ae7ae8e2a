package pod

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// The pod watch reads pods as the API server encoded them, not decoded.
//
// The informer keeps each pod as a cachedPod, whose packed form is the pod's
// protobuf encoding compressed. Through client-go's typed client every watch
// event was decoded into a corev1.Pod and then encoded again to be packed: both
// for an object of which the cache reads six fields. A node agent's busiest
// path is that watch (every create, status write and delete of its pods comes
// back through it), and the two steps were about a tenth of its CPU under load.
//
// So the pod informer lists and watches through a REST client whose decoder
// turns a protobuf Pod into a rawPod: its metadata decoded (which the
// informer's bookkeeping reads: name, namespace, resourceVersion, and the
// annotations of the bookmark that ends a streamed list), the rest left as
// bytes. Managed fields are dropped from the bytes on the way, as they were
// from the decoded pod. Everything else (Status objects of errors, other
// kinds) is decoded as before.

// rawPod is a pod as the pod informer receives it: its metadata decoded,
// without labels, owner references, finalizers and managed fields (no one
// reads them before compactRaw), and its whole protobuf encoding, without
// managed fields.
type rawPod struct {
	metav1.ObjectMeta
	raw []byte
}

func (p *rawPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *rawPod) DeepCopyObject() runtime.Object {
	return &rawPod{ObjectMeta: *p.ObjectMeta.DeepCopy(), raw: append([]byte(nil), p.raw...)}
}

// rawPodList is a PodList of rawPods.
type rawPodList struct {
	metav1.ListMeta
	Items []rawPod
}

func (l *rawPodList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *rawPodList) DeepCopyObject() runtime.Object {
	out := &rawPodList{ListMeta: *l.ListMeta.DeepCopy(), Items: make([]rawPod, len(l.Items))}
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*rawPod)
	}
	return out
}

// Field numbers in k8s.io/api's and apimachinery's generated.proto.
const (
	listMetadataField    = 1 // PodList
	listItemsField       = 2
	metaOwnerRefsField   = 13 // ObjectMeta (labels and annotations: podcache.go)
	metaFinalizersField  = 14
	metaManagedFieldsFld = 17
	specNodeNameField    = 10 // PodSpec
	specEphemeralField   = 34
	statusPhaseField     = 1 // PodStatus
)

// rawPodDecoder decodes protobuf Pods and PodLists into rawPods and
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
		p, ok := into.(*rawPod)
		if !ok {
			p = &rawPod{}
		}
		if err := p.decode(raw); err != nil {
			return nil, gvk, err
		}
		return p, gvk, nil
	}
	l, ok := into.(*rawPodList)
	if !ok {
		l = &rawPodList{}
	}
	*l = rawPodList{}
	err := walk(raw, func(num protowire.Number, whole []byte) error {
		if (num == listMetadataField || num == listItemsField) && !apiwire.IsBytes(whole) {
			return fmt.Errorf("field %d is not length-delimited", num)
		}
		switch num {
		case listMetadataField:
			return l.ListMeta.Unmarshal(apiwire.Value(whole))
		case listItemsField:
			l.Items = append(l.Items, rawPod{})
			return l.Items[len(l.Items)-1].decode(apiwire.Value(whole))
		}
		return nil
	})
	if err != nil {
		return nil, gvk, fmt.Errorf("decoding a PodList: %w", err)
	}
	return l, gvk, nil
}

// Field numbers of metav1.WatchEvent and runtime.RawExtension.
const (
	watchEventTypeField   = 1
	watchEventObjectField = 2
	rawExtensionRawField  = 1
)

// watchEventDecoder decodes the frames of the pod watch, WatchEvents, without
// copying the object in them: the event's Object.Raw is part of the frame.
// client-go's watch decoder decodes that object at once (a rawPod copies what it
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
	err := walk(data, func(num protowire.Number, whole []byte) error {
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
			return walk(apiwire.Value(whole), func(num protowire.Number, whole []byte) error {
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

// decode sets p from the encoding of a Pod: a copy of it without managed
// fields, and the metadata the informer reads.
//
// Every event of the pod watch comes through here, so the copy is made in one
// allocation of its final size: a first walk measures it (the watch's frame is
// reused for the next event, so a copy there must be).
func (p *rawPod) decode(pod []byte) error {
	*p = rawPod{}
	size, lightSize := 0, 0
	var kepts []int // what is kept of each metadata field (one, from the API server)
	err := walk(pod, func(num protowire.Number, whole []byte) error {
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
	_ = walk(pod, func(num protowire.Number, whole []byte) error {
		if num != podMetadataField {
			out = append(out, whole...)
			return nil
		}
		out = protowire.AppendTag(out, podMetadataField, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(kepts[0]))
		kepts = kepts[1:]
		return walk(apiwire.Value(whole), func(num protowire.Number, whole []byte) error {
			switch num {
			case metaManagedFieldsFld:
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

// metadataSizes measures what decode keeps of a pod's metadata: its fields
// but managed fields (kept), and of those the ones ObjectMeta is decoded from
// (light).
func metadataSizes(meta []byte) (kept, light int, err error) {
	err = walk(meta, func(num protowire.Number, whole []byte) error {
		switch num {
		case metaManagedFieldsFld:
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

// walk is eachField for bytes from the wire: a malformed field is an error,
// not the end of the message.
func walk(raw []byte, fn func(num protowire.Number, whole []byte) error) error {
	var err error
	read := 0
	apiwire.EachField(raw, func(num protowire.Number, whole []byte) bool {
		read += len(whole)
		err = fn(num, whole)
		return err == nil
	})
	if err == nil && read != len(raw) {
		err = fmt.Errorf("malformed protobuf field at byte %d of %d", read, len(raw))
	}
	return err
}

// compactRaw is compact for a pod received encoded.
func compactRaw(p *rawPod) *cachedPod { return cachedFrom(&p.ObjectMeta, p.raw) }

// rawPods lists and watches pods as rawPods, through a REST client of its own
// that shares the clientset's HTTP client and rate limiter.
type rawPods struct {
	rest *rest.RESTClient
	// of is the clientset's REST client, whose HTTP client and rate limiter
	// rest shares.
	of *rest.RESTClient
}

// sharedBy reports whether r reads for client, so that a node with the same
// client as its Source can share r.
func (r *rawPods) sharedBy(client kubernetes.Interface) bool {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	return r != nil && ok && rc == r.of
}

// newRawPods returns rawPods for the clientset's API server, or false if the
// clientset has no REST client to share (client-go's fakes): its pods are then
// read decoded.
func newRawPods(client kubernetes.Interface) (*rawPods, bool) {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil || rc.Client == nil {
		return nil, false
	}
	u := rc.Get().URL() // the base URL and the API path: …/api/v1
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, User: u.User}
	var info runtime.SerializerInfo
	for _, i := range scheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if i.MediaType == runtime.ContentTypeProtobuf {
			info = i
		}
	}
	if info.Serializer == nil || info.StreamSerializer == nil {
		return nil, false
	}
	info.Serializer = rawPodDecoder{info.Serializer}
	stream := *info.StreamSerializer // the scheme's, shared: changed in a copy
	stream.Serializer = watchEventDecoder{stream.Serializer}
	info.StreamSerializer = &stream
	gv := corev1.SchemeGroupVersion
	c, err := rest.NewRESTClient(base, u.Path, rest.ClientContentConfig{
		AcceptContentTypes: runtime.ContentTypeProtobuf,
		ContentType:        runtime.ContentTypeProtobuf,
		GroupVersion:       gv,
		Negotiator:         runtime.NewClientNegotiator(runtime.NewSimpleNegotiatedSerializer(info), gv),
	}, rc.GetRateLimiter(), rc.Client)
	if err != nil {
		return nil, false
	}
	return &rawPods{rest: c, of: rc}, true
}

// rawPodsOf is newRawPods without the flag.
func rawPodsOf(client kubernetes.Interface) *rawPods {
	r, _ := newRawPods(client)
	return r
}

func timeoutOf(o metav1.ListOptions) time.Duration {
	if o.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*o.TimeoutSeconds) * time.Second
}

// List lists pods (of all namespaces) as the typed client does.
func (r *rawPods) List(ctx context.Context, o metav1.ListOptions) (*rawPodList, error) {
	out := &rawPodList{}
	err := r.rest.Get().Resource("pods").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeoutOf(o)).Do(ctx).Into(out)
	return out, err
}

// Watch watches pods (of all namespaces) as the typed client does.
func (r *rawPods) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return r.rest.Get().Resource("pods").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeoutOf(o)).Watch(ctx)
}

// podsListWatch lists and watches the pods selected by selector (a field
// selector), encoded through raw, or decoded through client if raw is nil.
func podsListWatch(client kubernetes.Interface, raw *rawPods, selector string) cache.ListerWatcher {
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = selector }
	if raw != nil {
		return informerutil.ListWatchOf(client, raw, tweak)
	}
	return informerutil.ListWatchOf(client, client.CoreV1().Pods(metav1.NamespaceAll), tweak)
}

// podInformer returns an informer of the pods lw lists and watches, encoded if
// raw (lw's reader) is not nil. Its transform must be compactTransform.
func podInformer(lw cache.ListerWatcher, raw *rawPods, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	if raw != nil {
		return cache.NewSharedIndexInformer(lw, &rawPod{}, resync, indexers)
	}
	return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, indexers)
}
