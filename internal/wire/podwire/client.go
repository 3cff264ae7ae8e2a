package podwire

import (
	"context"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/vkubelet/vkubelet/internal/informerutil"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// Client lists and watches pods as RawPods, and writes their statuses,
// through a REST client of its own that shares the clientset's HTTP client and
// rate limiter.
type Client struct {
	rest *rest.RESTClient
	// of is the clientset's REST client, whose HTTP client and rate limiter
	// rest shares.
	of *rest.RESTClient
}

// SharedBy reports whether r reads for client, so that a node with the same
// client as its Source can share r. A nil r is shared by none.
func (r *Client) SharedBy(client kubernetes.Interface) bool {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	return r != nil && ok && rc == r.of
}

// NewClient returns a Client for the clientset's API server, or false if the
// clientset has no REST client to share (client-go's fakes): its pods are then
// read decoded.
func NewClient(client kubernetes.Interface) (*Client, bool) {
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
	return &Client{rest: c, of: rc}, true
}

func timeoutOf(o metav1.ListOptions) time.Duration {
	if o.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*o.TimeoutSeconds) * time.Second
}

// List lists pods (of all namespaces) as the typed client does.
func (r *Client) List(ctx context.Context, o metav1.ListOptions) (*RawPodList, error) {
	out := &RawPodList{}
	err := r.rest.Get().Resource("pods").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeoutOf(o)).Do(ctx).Into(out)
	return out, err
}

// Watch watches pods (of all namespaces) as the typed client does.
func (r *Client) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return r.rest.Get().Resource("pods").VersionedParams(&o, scheme.ParameterCodec).
		Timeout(timeoutOf(o)).Watch(ctx)
}

// PatchStatus sends a strategic-merge patch to the status subresource of the
// pod namespace/name and returns the fingerprint of the status the API server
// stored (Pod.StatusHash of the pod it will send through the watch), or 0 if
// its answer does not tell.
//
// The API server answers with the whole pod, which is not decoded (the
// informer brings the pod anyway, and decoding it took a tenth of the node's
// CPU per pod start), nor copied: it is read into a reused buffer
// (internal/wire/apiwire) and fingerprinted from its encoding.
func (r *Client) PatchStatus(ctx context.Context, namespace, name string, patch []byte) (uint64, error) {
	answer, err := r.rest.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").
		Name(name).SubResource("status").Body(patch).Stream(ctx)
	if err != nil {
		return 0, err
	}
	var status uint64
	err = apiwire.Read(answer, func(data []byte) error {
		if kind, raw, ok := apiwire.Envelope(data); ok && string(kind) == "Pod" {
			status = statusFingerprint(raw)
		}
		return nil
	})
	return status, err
}

// ListWatch lists and watches the pods selected by selector (a field
// selector), encoded through raw, or decoded through client if raw is nil.
func ListWatch(client kubernetes.Interface, raw *Client, selector string) cache.ListerWatcher {
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = selector }
	if raw != nil {
		return informerutil.ListWatchOf(client, raw, tweak)
	}
	return informerutil.ListWatchOf(client, client.CoreV1().Pods(metav1.NamespaceAll), tweak)
}

// NewInformer returns an informer of the pods lw lists and watches, encoded if
// raw (lw's reader) is not nil. Its transform must be TransformOf its
// indexer.
func NewInformer(lw cache.ListerWatcher, raw *Client, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	if raw != nil {
		return cache.NewSharedIndexInformer(lw, &RawPod{}, resync, indexers)
	}
	return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, indexers)
}
