package wirefixtures

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

// The Accept headers of the node's requests: its clientset's, configured for
// protobuf (the default) or JSON (internal/process/agent), and its pod
// client's (podwire.Client), which reads protobuf only.
const (
	acceptClientset = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	acceptJSON      = runtime.ContentTypeJSON
	acceptPods      = runtime.ContentTypeProtobuf
)

// The watch's timeout: the API server sends a BOOKMARK to a watch that allows
// them about two seconds before its timeout, which must leave the recording the
// time to create, update and delete the pod first.
const watchTimeout = 30

// initialEventsEnd is the annotation of the BOOKMARK that ends the initial
// events of a streamed list (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// Built reports whether the lab's cache holds the binaries of release version
// as its build module builds them (controlplane.Built), so that Record starts
// its control plane without building it, which takes minutes.
func Built(version string) (bool, error) { return controlplane.Built(version) }

// Record starts a control plane of release version (etcd and kube-apiserver),
// records its answers and writes them to dir/<version>, replacing what was
// there only once all are recorded. Progress goes to log.
func Record(ctx context.Context, version, dir string, log io.Writer) error {
	cp, err := controlplane.Start(ctx, controlplane.Config{KubernetesVersion: version, ServiceAccountAdmission: true, Out: log})
	if err != nil {
		return fmt.Errorf("starting the control plane of %s: %w", version, err)
	}
	defer func() { _ = cp.Stop() }()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "."+version+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r, err := newRecorder(cp, tmp, log)
	if err != nil {
		return err
	}
	r.m.KubernetesVersion = version
	if err := r.record(ctx); err != nil {
		return fmt.Errorf("recording %s: %w", version, err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the paths' queries, readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(&r.m); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ManifestFile), b.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	final := filepath.Join(dir, version)
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// recorder records one control plane's answers.
type recorder struct {
	cp *controlplane.ControlPlane
	// client sets the scene (namespace, node, pod): its requests are not
	// recorded.
	client kubernetes.Interface
	// http sends the recorded requests, with the admin's credentials.
	http *http.Client
	dir  string
	log  io.Writer
	m    Manifest
}

func newRecorder(cp *controlplane.ControlPlane, dir string, log io.Writer) (*recorder, error) {
	client, err := cp.Client()
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cp.RESTConfig)
	if err != nil {
		return nil, err
	}
	return &recorder{cp: cp, client: client, http: hc, dir: dir, log: log, m: Manifest{
		Namespace: namespace, Pod: podName, Node: nodeName, ServiceAccount: serviceAccount,
	}}, nil
}

// request is a recorded request.
type request struct {
	method, path, accept, contentType string
	body                              []byte
}

func (r *recorder) send(ctx context.Context, req request) (*http.Response, error) {
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, r.cp.URL+req.path, body)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Accept", req.accept)
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	hr.Header.Set("User-Agent", "vkubelet-wirefixtures")
	return r.http.Do(hr)
}

// answer is a recorded answer.
type answer struct {
	status      int
	contentType string
	body        []byte
	// events are the types of a watch's events.
	events []string
}

// save writes an answer's body to file and adds the exchange to the manifest.
func (r *recorder) save(file string, req request, a answer) error {
	r.m.Exchanges = append(r.m.Exchanges, Exchange{File: file, Method: req.method, Path: req.path,
		Accept: req.accept, ContentType: req.contentType, Status: a.status,
		ResponseContentType: a.contentType, Events: a.events})
	fmt.Fprintf(r.log, "wirefixtures: %s %s: %d, %d bytes\n", req.method, req.path, a.status, len(a.body))
	return writeBody(filepath.Join(r.dir, file), a.body)
}

// exchange sends req and records its answer, which must be a success.
func (r *recorder) exchange(ctx context.Context, file string, req request) error {
	resp, err := r.send(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %q", req.method, req.path, resp.Status, body)
	}
	return r.save(file, req, answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body})
}

// watch sends the watch req and returns its answer: the frames read until
// done is true of one or the API server ends the watch, or its refusal.
func (r *recorder) watch(ctx context.Context, req request, done func(watch.EventType, runtime.Object) bool) (answer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := r.send(ctx, req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		a.body, err = io.ReadAll(resp.Body)
		return a, err
	}
	var body bytes.Buffer
	for {
		// The protobuf watch stream: each WatchEvent after its length, 4 bytes
		// big-endian.
		var head [4]byte
		if _, err := io.ReadFull(resp.Body, head[:]); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return a, fmt.Errorf("reading the watch %s: %w", req.path, err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(head[:]))
		if _, err := io.ReadFull(resp.Body, frame); err != nil {
			return a, fmt.Errorf("reading the watch %s: %w", req.path, err)
		}
		body.Write(head[:])
		body.Write(frame)
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame); err != nil {
			return a, fmt.Errorf("reading the watch %s: %w", req.path, err)
		}
		obj, err := runtime.Decode(scheme.Codecs.UniversalDeserializer(), ev.Object.Raw)
		if err != nil {
			return a, fmt.Errorf("reading the watch %s: event %s: %w", req.path, ev.Type, err)
		}
		a.events = append(a.events, ev.Type)
		if done(watch.EventType(ev.Type), obj) {
			break
		}
	}
	a.body = body.Bytes()
	return a, nil
}

// record sets the scene and records every exchange.
func (r *recorder) record(ctx context.Context) error {
	v, err := r.client.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	r.m.ServerVersion = v.GitVersion
	if err := r.setUp(ctx); err != nil {
		return fmt.Errorf("setting up: %w", err)
	}
	pods := r.client.CoreV1().Pods(namespace)
	onNode := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	before, err := r.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: onNode})
	if err != nil {
		return err
	}

	// The node's watch, from before the pod exists to after it is gone.
	type watched struct {
		answer
		err error
	}
	watchReq := request{method: http.MethodGet, accept: acceptPods,
		path: r.podsPath(metav1.ListOptions{Watch: true, AllowWatchBookmarks: true, FieldSelector: onNode,
			ResourceVersion: before.ResourceVersion, TimeoutSeconds: ptr.To[int64](watchTimeout)})}
	watching := make(chan watched, 1)
	wctx, cancel := context.WithTimeout(ctx, 2*watchTimeout*time.Second)
	defer cancel()
	go func() {
		deleted, bookmarked := false, false
		a, err := r.watch(wctx, watchReq, func(t watch.EventType, _ runtime.Object) bool {
			deleted = deleted || t == watch.Deleted
			bookmarked = bookmarked || t == watch.Bookmark
			return deleted && bookmarked
		})
		watching <- watched{a, err}
	}()

	if err := r.createPod(ctx); err != nil {
		return err
	}
	podPath := "/api/v1/namespaces/" + namespace + "/pods/" + podName
	get := request{method: http.MethodGet, path: podPath, accept: acceptClientset}
	if err := r.exchange(ctx, PodProtobuf, get); err != nil {
		return err
	}
	get.accept = acceptJSON
	if err := r.exchange(ctx, PodJSON, get); err != nil {
		return err
	}
	// The reflector's list, when it does not stream it: from the watch cache.
	if err := r.exchange(ctx, ListProtobuf, request{method: http.MethodGet, accept: acceptPods,
		path: r.podsPath(metav1.ListOptions{FieldSelector: onNode, ResourceVersion: "0"})}); err != nil {
		return err
	}
	// The reflector's streamed list (client-go's WatchListClient).
	listReq := request{method: http.MethodGet, accept: acceptPods,
		path: r.podsPath(metav1.ListOptions{Watch: true, AllowWatchBookmarks: true, FieldSelector: onNode,
			SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			TimeoutSeconds: ptr.To[int64](10)})}
	streamed, err := r.watch(ctx, listReq, func(t watch.EventType, obj runtime.Object) bool {
		m, ok := obj.(metav1.Object)
		return t == watch.Bookmark && ok && m.GetAnnotations()[initialEventsEnd] == "true"
	})
	if err != nil {
		return err
	}
	if err := r.save(WatchListProtobuf, listReq, streamed); err != nil {
		return err
	}

	p, err := pods.Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := r.requestTokens(ctx, p); err != nil {
		return err
	}
	// The node's status write, as the pod controller builds it.
	running := RunningStatus(p, metav1.Now().Rfc3339Copy())
	patch, err := statuspatch.Build(p.UID, &p.Status, &running)
	if err != nil {
		return err
	}
	if err := r.exchange(ctx, PatchStatusProtobuf, request{method: http.MethodPatch, path: podPath + "/status",
		accept: acceptPods, contentType: string(types.StrategicMergePatchType), body: patch}); err != nil {
		return err
	}

	if p, err = pods.Get(ctx, podName, metav1.GetOptions{}); err != nil {
		return err
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ephemeralContainer())
	if _, err := pods.UpdateEphemeralContainers(ctx, podName, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("adding an ephemeral container: %w", err)
	}
	get.accept = acceptClientset
	if err := r.exchange(ctx, EphemeralProtobuf, get); err != nil {
		return err
	}
	get.accept = acceptJSON
	if err := r.exchange(ctx, EphemeralJSON, get); err != nil {
		return err
	}

	// Deleted as a pod bound to a node is: gracefully (MODIFIED, a deletion
	// timestamp), then by the node once its containers stopped (DELETED).
	if err := pods.Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		return err
	}
	if err := pods.Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
		Preconditions: metav1.NewUIDPreconditions(string(p.UID))}); err != nil {
		return err
	}
	w := <-watching
	if w.err != nil {
		return w.err
	}
	if !slices.Contains(w.events, string(watch.Deleted)) {
		return fmt.Errorf("the watch ended without the pod's deletion: %v", w.events)
	}
	return r.save(WatchProtobuf, watchReq, w.answer)
}

// podsPath is the path of the node's list or watch of pods with options o,
// as podwire.Client writes it (through client-go's request, which adds the
// timeout of the request to the query).
func (r *recorder) podsPath(o metav1.ListOptions) string {
	req := r.client.CoreV1().RESTClient().Get().Resource("pods").VersionedParams(&o, scheme.ParameterCodec)
	if o.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
	}
	return req.URL().RequestURI()
}

// setUp creates what the pod refers to and what a cluster's controllers would
// have made: the namespace's default ServiceAccount and root CA ConfigMap (the
// token volume's), the ConfigMap and Secret of its environment and volumes,
// and the node.
func (r *recorder) setUp(ctx context.Context) error {
	c := r.client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	ca, err := os.ReadFile(r.cp.PKI.CACert)
	if err != nil {
		return err
	}
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca)}},
		{ObjectMeta: metav1.ObjectMeta{Name: configMapName}, Data: map[string]string{"config.yaml": "listen: :8080\n", "features": "a,b", "vault-addr": "https://vault:8200"}},
	} {
		if _, err := c.ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := c.Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName},
		StringData: map[string]string{"db-url": "postgres://db/web", "api-key": "k", "tls.crt": "c", "tls.key": "k"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = c.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
		Labels: map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": nodeName, "type": "virtual-kubelet"}}}, metav1.CreateOptions{})
	return err
}

// createPod creates the rich pod, without the parts the release refuses,
// and notes those it refused or dropped.
func (r *recorder) createPod(ctx context.Context) error {
	p := richPod(string(uuid.NewUUID()))
	left := optionals
	for {
		created, err := r.client.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			for _, o := range left {
				if !o.kept(created) {
					fmt.Fprintf(r.log, "wirefixtures: %s dropped the pod's %s\n", r.m.KubernetesVersion, o.name)
					r.m.Dropped = append(r.m.Dropped, o.name)
				}
			}
			return nil
		}
		if !apierrors.IsInvalid(err) {
			return err
		}
		drop := refused(left, err.Error())
		if len(drop) == 0 {
			return fmt.Errorf("creating the pod: %w", err)
		}
		for _, o := range drop {
			fmt.Fprintf(r.log, "wirefixtures: %s refused the pod's %s (%v); recording it without\n", r.m.KubernetesVersion, o.name, err)
			o.drop(p)
			r.m.Omitted = append(r.m.Omitted, o.name)
		}
		left = withoutNames(left, drop)
	}
}

func withoutNames(all, drop []optional) []optional {
	var out []optional
	for _, o := range all {
		dropped := false
		for _, d := range drop {
			dropped = dropped || d.name == o.name
		}
		if !dropped {
			out = append(out, o)
		}
	}
	return out
}

// requestTokens records the answers to the TokenRequests the node sends for
// the pod: its service-account token volume's (no audience, 3607 s, with the
// clientset configured for protobuf) and its projected vault token's (JSON).
func (r *recorder) requestTokens(ctx context.Context, p *corev1.Pod) error {
	bound := &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
	path := "/api/v1/namespaces/" + namespace + "/serviceaccounts/" + serviceAccount + "/token"
	for _, t := range []struct {
		file, accept, contentType string
		spec                      authenticationv1.TokenRequestSpec
	}{
		{TokenProtobuf, acceptClientset, runtime.ContentTypeProtobuf,
			authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3607), BoundObjectRef: bound}},
		{TokenJSON, acceptJSON, runtime.ContentTypeJSON,
			authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}, ExpirationSeconds: ptr.To[int64](3600), BoundObjectRef: bound}},
	} {
		body, err := encode(t.contentType, authenticationv1.SchemeGroupVersion, &authenticationv1.TokenRequest{Spec: t.spec})
		if err != nil {
			return err
		}
		if err := r.exchange(ctx, t.file, request{method: http.MethodPost, path: path, accept: t.accept,
			contentType: t.contentType, body: body}); err != nil {
			return err
		}
	}
	return nil
}

// encode encodes obj in mediaType as client-go's REST client does a request's
// body.
func encode(mediaType string, gv schema.GroupVersion, obj runtime.Object) ([]byte, error) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		return nil, fmt.Errorf("no serializer for %s", mediaType)
	}
	return runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gv), obj)
}
