package podwire

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/compact/podpack"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/wirefixtures"
	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

// The tests of this file decode what the API server of each Kubernetes
// release the lab runs sent (internal/wire/testdata/releases, recorded by
// `go run ./internal/lab/wirefixtures/mkwirefixtures`) with this package's
// decoders and with client-go's, and hold the two to the same pod: an
// encoding of some release that the decoders misread fails here, without an
// API server.

const releasesDir = "../testdata/releases"

func releases(t *testing.T) []wirefixtures.Release {
	t.Helper()
	rs, err := wirefixtures.Load(releasesDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatalf("no release's fixtures in %s: record them with go run ./internal/lab/wirefixtures/mkwirefixtures", releasesDir)
	}
	return rs
}

func fixture(t *testing.T, r wirefixtures.Release, file string) []byte {
	t.Helper()
	b, err := r.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func protobufSerializer() runtime.SerializerInfo {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return info
}

// decodedByClientGo is data as client-go's typed client decodes it.
func decodedByClientGo[T runtime.Object](t *testing.T, data []byte) T {
	t.Helper()
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("client-go: %v", err)
	}
	out, ok := obj.(T)
	if !ok {
		t.Fatalf("client-go decoded a %T", obj)
	}
	return out
}

// decodedRaw is data, a protobuf Pod or PodList, as the pod client decodes it.
func decodedRaw[T runtime.Object](t *testing.T, data []byte) T {
	t.Helper()
	obj, _, err := rawPodDecoder{protobufSerializer().Serializer}.Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("rawPodDecoder: %v", err)
	}
	out, ok := obj.(T)
	if !ok {
		t.Fatalf("rawPodDecoder decoded a %T", obj)
	}
	return out
}

// sameAsClientGo checks that got, a pod of release r read by the pod client,
// keeps and reads everything of want, the same pod decoded by client-go
// (readsAsClientGo), and is cached as the pod read decoded (through a
// clientset without a REST client of its own: client-go's fakes) is. Its
// encoding is the release's; read decoded, it is re-encoded by our client-go,
// which writes the fields of emptyFieldsSince that the release lacks: the two
// encodings may differ by those alone, and then so do the status fingerprints
// and packed bytes of the two cached pods.
func sameAsClientGo(t *testing.T, r wirefixtures.Release, step string, got *RawPod, want *corev1.Pod) {
	t.Helper()
	readsAsClientGo(t, step, got, want)
	c, viaClientGo := fromRaw(got), compacted(t, want.DeepCopy())
	server, clientGo := encodingOf(t, c), encodingOf(t, viaClientGo)
	minor, err := controlplane.MinorOf(r.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	expected := clientGo
	for _, f := range emptyFieldsSince {
		if minor < f.minor {
			expected = withoutEmpty(t, expected, f.path)
		}
	}
	if !bytes.Equal(server, expected) {
		t.Errorf("%s: %s encodes the pod otherwise than our client-go does, beyond the fields of emptyFieldsSince it lacks:\n%q\nour client-go, without them:\n%q",
			step, r.KubernetesVersion, server, expected)
	}
	a, b := *c, *viaClientGo
	a.packed, b.packed = "", ""
	if !bytes.Equal(apiwire.Field(server, podStatusField), apiwire.Field(clientGo, podStatusField)) {
		a.statusHash, b.statusHash = 0, 0
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s: read encoded, the pod is cached as\n%+v\nread decoded, as\n%+v", step, c, viaClientGo)
	}
}

// emptyFieldsSince are the fields our client-go writes even when empty (they
// are not pointers) and that the API servers of releases before v1.<minor>
// do not have, so never send: the pods of those releases encode otherwise once
// decoded and re-encoded by our client-go, though they are the same pods. A
// path's last field is a varint; every field of a step's number is followed.
var emptyFieldsSince = []struct {
	minor int
	path  []protowire.Number
}{
	{33, []protowire.Number{podStatusField, 17}},   // PodStatus.observedGeneration
	{33, []protowire.Number{podStatusField, 2, 7}}, // PodCondition.observedGeneration, of each condition
}

// withoutEmpty returns msg without the varint fields at path whose value is
// zero.
func withoutEmpty(t *testing.T, msg []byte, path []protowire.Number) []byte {
	t.Helper()
	var out []byte
	apiwire.EachField(msg, func(num protowire.Number, whole []byte) bool {
		switch {
		case num != path[0]:
			out = append(out, whole...)
		case len(path) == 1:
			if v, ok := apiwire.Varint(whole); !ok || v != 0 {
				out = append(out, whole...)
			}
		default:
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, withoutEmpty(t, apiwire.Value(whole), path[1:]))
		}
		return true
	})
	return out
}

// compacted is Compact(p), which must not fail.
func compacted(t *testing.T, p *corev1.Pod) *Pod {
	t.Helper()
	c, err := Compact(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// encodingOf is the encoding of the cached pod c.
func encodingOf(t *testing.T, c *Pod) []byte {
	t.Helper()
	var out []byte
	if err := podpack.UnpackEncoded(c.packedBytes(), func(raw []byte) error {
		out = slices.Clone(raw)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// readsAsClientGo checks that got, a pod read by the pod client, keeps and
// reads everything of want, the same pod decoded by client-go: the informer's
// metadata, and every reading of the cached Pod.
func readsAsClientGo(t *testing.T, step string, got *RawPod, want *corev1.Pod) {
	t.Helper()
	meta := want.ObjectMeta.DeepCopy()
	meta.Labels, meta.OwnerReferences, meta.Finalizers, meta.ManagedFields = nil, nil, nil, nil
	if !apiequality.Semantic.DeepEqual(got.ObjectMeta, *meta) {
		t.Errorf("%s: the informer's metadata differs from client-go's without labels, owners, finalizers and managed fields:\n%s",
			step, jsonDiff(got.ObjectMeta, *meta))
	}
	if got.NodeName() != want.Spec.NodeName {
		t.Errorf("%s: NodeName %q, want %q", step, got.NodeName(), want.Spec.NodeName)
	}
	c := fromRaw(got)
	if c.Namespace != want.Namespace || c.Name != want.Name || c.UID != want.UID || c.ResourceVersion != want.ResourceVersion ||
		c.NodeName != want.Spec.NodeName || !reflect.DeepEqual(c.DeletionTimestamp, want.DeletionTimestamp) {
		t.Errorf("%s: cached as %s/%s uid %s rv %s node %q deleted %v, want %s/%s uid %s rv %s node %q deleted %v", step,
			c.Namespace, c.Name, c.UID, c.ResourceVersion, c.NodeName, c.DeletionTimestamp,
			want.Namespace, want.Name, want.UID, want.ResourceVersion, want.Spec.NodeName, want.DeletionTimestamp)
	}
	terminal := want.Status.Phase == corev1.PodSucceeded || want.Status.Phase == corev1.PodFailed
	if c.Terminal() != terminal || c.HasEphemeralContainers() != (len(want.Spec.EphemeralContainers) > 0) {
		t.Errorf("%s: cached as terminal %v, with ephemeral containers %v; the pod has phase %s and %d ephemeral containers",
			step, c.Terminal(), c.HasEphemeralContainers(), want.Status.Phase, len(want.Spec.EphemeralContainers))
	}
	whole := want.DeepCopy()
	whole.ManagedFields, whole.TypeMeta = nil, metav1.TypeMeta{} // the kind is the envelope's
	if p, err := c.Decode(); err != nil || !apiequality.Semantic.DeepEqual(p, whole) {
		t.Errorf("%s: Decode: %v; the decoded pod differs from client-go's:\n%s", step, err, jsonDiff(p, whole))
	}
	if gen, err := c.Generation(); err != nil || gen != want.Generation {
		t.Errorf("%s: Generation %d, %v, want %d", step, gen, err, want.Generation)
	}
	ws, err := c.WithStatus()
	if err != nil || !apiequality.Semantic.DeepEqual(ws.Status, want.Status) || ws.Generation != want.Generation ||
		!apiequality.Semantic.DeepEqual(ws.Spec.ReadinessGates, want.Spec.ReadinessGates) ||
		!reflect.DeepEqual(ws.Spec.ActiveDeadlineSeconds, want.Spec.ActiveDeadlineSeconds) {
		t.Errorf("%s: WithStatus: %v; differs from client-go's status, generation, readiness gates and deadline:\n%s", step, err,
			jsonDiff(ws, &corev1.Pod{ObjectMeta: ws.ObjectMeta, Status: want.Status, Spec: corev1.PodSpec{
				ReadinessGates: want.Spec.ReadinessGates, ActiveDeadlineSeconds: want.Spec.ActiveDeadlineSeconds}}))
	}
	wantNames := Containers{}
	for _, ctr := range want.Spec.Containers {
		wantNames.App = append(wantNames.App, ctr.Name)
	}
	for _, ctr := range want.Spec.InitContainers {
		wantNames.Init = append(wantNames.Init, ctr.Name)
		if ptr.Deref(ctr.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways {
			if wantNames.Sidecars == nil {
				wantNames.Sidecars = map[string]bool{}
			}
			wantNames.Sidecars[ctr.Name] = true
		}
	}
	if names, err := c.Containers(); err != nil || !reflect.DeepEqual(names, wantNames) {
		t.Errorf("%s: Containers %+v, %v, want %+v", step, names, err, wantNames)
	}
	wantResources := &corev1.PodSpec{Resources: want.Spec.Resources}
	for _, list := range []struct{ from, to *[]corev1.Container }{
		{&want.Spec.Containers, &wantResources.Containers}, {&want.Spec.InitContainers, &wantResources.InitContainers},
	} {
		for _, ctr := range *list.from {
			*list.to = append(*list.to, corev1.Container{Name: ctr.Name, Resources: ctr.Resources, RestartPolicy: ctr.RestartPolicy})
		}
	}
	if spec, err := c.ResourcesSpec(); err != nil || !apiequality.Semantic.DeepEqual(spec, wantResources) {
		t.Errorf("%s: ResourcesSpec: %v; differs from client-go's:\n%s", step, err, jsonDiff(spec, wantResources))
	}
}

// Each release's pods, got, listed, as the status write's answer and with an
// ephemeral container, are read by the pod client as client-go reads them.
func TestEachReleasesPodsReadAsClientGoReadsThem(t *testing.T) {
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			for _, file := range []string{wirefixtures.PodProtobuf, wirefixtures.PatchStatusProtobuf, wirefixtures.EphemeralProtobuf} {
				data := fixture(t, r, file)
				sameAsClientGo(t, r, file, decodedRaw[*RawPod](t, data), decodedByClientGo[*corev1.Pod](t, data))
			}
			data := fixture(t, r, wirefixtures.ListProtobuf)
			got, want := decodedRaw[*RawPodList](t, data), decodedByClientGo[*corev1.PodList](t, data)
			if !apiequality.Semantic.DeepEqual(got.ListMeta, want.ListMeta) || len(got.Items) != len(want.Items) || len(got.Items) == 0 {
				t.Fatalf("list: %+v with %d pods, want %+v with %d", got.ListMeta, len(got.Items), want.ListMeta, len(want.Items))
			}
			for i := range got.Items {
				sameAsClientGo(t, r, "list", &got.Items[i], &want.Items[i])
			}
			ephemeral := decodedByClientGo[*corev1.Pod](t, fixture(t, r, wirefixtures.EphemeralProtobuf))
			if len(ephemeral.Spec.EphemeralContainers) == 0 || len(ephemeral.Spec.InitContainers) == 0 || ephemeral.Status.Phase != corev1.PodRunning {
				t.Errorf("%s: the recording lacks what it is for: %d ephemeral containers, %d init containers, phase %s",
					wirefixtures.EphemeralProtobuf, len(ephemeral.Spec.EphemeralContainers), len(ephemeral.Spec.InitContainers), ephemeral.Status.Phase)
			}
		})
	}
}

// serve answers the requests recorded for r with their recorded answers,
// and fails t on a request that was recorded otherwise (another path or
// query, another Accept or Content-Type): the fixtures are what the node's
// clients would receive only while they ask as they did.
func serve(t *testing.T, r wirefixtures.Release) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Of the exchanges of this method and path (a GET of the pod was
		// recorded in protobuf and in JSON), the one asked for the same way.
		var found *wirefixtures.Exchange
		for _, e := range r.Exchanges {
			if e.Method == req.Method && e.Path == req.URL.RequestURI() && (found == nil || e.Accept == req.Header.Get("Accept")) {
				found = &e
			}
		}
		if found == nil {
			t.Errorf("%s: no fixture answers %s %s", r.KubernetesVersion, req.Method, req.URL.RequestURI())
			http.NotFound(w, req)
			return
		}
		if got := req.Header.Get("Accept"); got != found.Accept {
			t.Errorf("%s %s: asked with Accept %q, recorded with %q", req.Method, req.URL.RequestURI(), got, found.Accept)
		}
		if got := req.Header.Get("Content-Type"); found.ContentType != "" && got != found.ContentType {
			t.Errorf("%s %s: sent with Content-Type %q, recorded with %q", req.Method, req.URL.RequestURI(), got, found.ContentType)
		}
		body, err := r.Read(found.File)
		if err != nil {
			t.Error(err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", found.ResponseContentType)
		w.WriteHeader(found.Status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// clients are the pod client and, to compare with, a typed clientset that
// reads protobuf as the node's does, both of the fixtures' server.
func clients(t *testing.T, srv *httptest.Server) (*Client, kubernetes.Interface) {
	t.Helper()
	cfg := &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{
		ContentType: runtime.ContentTypeProtobuf, AcceptContentTypes: runtime.ContentTypeProtobuf}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := NewClient(c)
	if !ok {
		t.Fatal("NewClient: no REST client")
	}
	return raw, c
}

// listOptions are the options the request of e was sent with.
func listOptions(t *testing.T, e wirefixtures.Exchange) metav1.ListOptions {
	t.Helper()
	u, err := url.Parse(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	var o metav1.ListOptions
	if err := scheme.ParameterCodec.DecodeParameters(u.Query(), corev1.SchemeGroupVersion, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func exchange(t *testing.T, r wirefixtures.Release, file string) wirefixtures.Exchange {
	t.Helper()
	e, ok := r.Exchange(file)
	if !ok {
		t.Fatalf("%s: no %s in the manifest", r.KubernetesVersion, file)
	}
	return e
}

// events reads a watch to its end.
func events(t *testing.T, w watch.Interface, err error) []watch.Event {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var out []watch.Event
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatal("the watch did not end with its fixture")
		}
	}
}

// Each release's pod watch and streamed list read, through the pod client,
// as through client-go's typed client; the pod's spec fingerprint stays
// through its status write and changes with its ephemeral container, and the
// answer to the status write has the status fingerprint of the update it makes,
// so that the write is known for its own echo.
func TestEachReleasesPodWatchReadsAsClientGoReadsIt(t *testing.T) {
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			raw, typed := clients(t, serve(t, r))

			e := exchange(t, r, wirefixtures.ListProtobuf)
			list, err := raw.List(ctx, listOptions(t, e))
			if err != nil {
				t.Fatal(err)
			}
			want, err := typed.CoreV1().Pods("").List(ctx, listOptions(t, e))
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != len(want.Items) || list.ResourceVersion != want.ResourceVersion {
				t.Fatalf("listed %d pods at %s, want %d at %s", len(list.Items), list.ResourceVersion, len(want.Items), want.ResourceVersion)
			}
			for i := range list.Items {
				sameAsClientGo(t, r, "listed", &list.Items[i], &want.Items[i])
			}

			var watched []watch.Event
			for _, file := range []string{wirefixtures.WatchListProtobuf, wirefixtures.WatchProtobuf} {
				e := exchange(t, r, file)
				w, err := raw.Watch(ctx, listOptions(t, e))
				wt, werr := typed.CoreV1().Pods("").Watch(ctx, listOptions(t, e))
				if e.Status != http.StatusOK {
					// The release refuses the request: both say so alike.
					if err == nil || werr == nil || apierrors.ReasonForError(err) != apierrors.ReasonForError(werr) {
						t.Errorf("%s: refused (%d) as %v; client-go: %v", file, e.Status, err, werr)
					}
					continue
				}
				got, want := events(t, w, err), events(t, wt, werr)
				if len(got) != len(e.Events) || len(want) != len(e.Events) {
					t.Fatalf("%s: %d events, client-go %d, recorded %v", file, len(got), len(want), e.Events)
				}
				for i := range got {
					step := file + " " + string(got[i].Type)
					if got[i].Type != want[i].Type || string(got[i].Type) != e.Events[i] {
						t.Fatalf("%s: event %d is %s, client-go's %s, recorded %s", file, i, got[i].Type, want[i].Type, e.Events[i])
					}
					rp, ok := got[i].Object.(*RawPod)
					if !ok {
						t.Fatalf("%s: a %T", step, got[i].Object)
					}
					sameAsClientGo(t, r, step, rp, want[i].Object.(*corev1.Pod))
				}
				if file == wirefixtures.WatchListProtobuf {
					if end := got[len(got)-1]; end.Type != watch.Bookmark || end.Object.(*RawPod).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
						t.Errorf("%s: the streamed list ends with %s %+v, not its bookmark", file, end.Type, end.Object)
					}
				}
				watched = got
			}

			// The watch: ADDED, the status write, the ephemeral container, the
			// graceful deletion, ... DELETED.
			pods := map[string]*Pod{}
			for _, ev := range watched {
				if ev.Type != watch.Bookmark {
					rp := ev.Object.(*RawPod)
					pods[rp.ResourceVersion] = fromRaw(rp)
				}
			}
			if len(watched) == 0 || watched[0].Type != watch.Added {
				t.Fatalf("the watch starts with %v, not the pod's creation", watched)
			}
			added, updates := fromRaw(watched[0].Object.(*RawPod)), watched[1:]
			written, err := raw.PatchStatus(ctx, r.Namespace, r.Pod, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			answer := decodedByClientGo[*corev1.Pod](t, fixture(t, r, wirefixtures.PatchStatusProtobuf))
			echo, ok := pods[answer.ResourceVersion]
			if !ok {
				t.Fatalf("no watch event of the status write's resource version %s", answer.ResourceVersion)
			}
			if written == 0 || echo.StatusHash() != written || echo.StatusHash() == added.StatusHash() {
				t.Errorf("the status write's answer has fingerprint %x, its update %x, the pod as added %x", written, echo.StatusHash(), added.StatusHash())
			}
			if echo.SpecHash() != added.SpecHash() {
				t.Errorf("the status write changed the spec fingerprint: %x, was %x", echo.SpecHash(), added.SpecHash())
			}
			i := slices.IndexFunc(updates, func(ev watch.Event) bool {
				return ev.Type == watch.Modified && fromRaw(ev.Object.(*RawPod)).HasEphemeralContainers()
			})
			if i < 0 || fromRaw(updates[i].Object.(*RawPod)).SpecHash() == added.SpecHash() {
				t.Errorf("no update with the ephemeral container and a spec fingerprint of its own (at %d)", i)
			}
			if !slices.ContainsFunc(updates, func(ev watch.Event) bool {
				return ev.Type == watch.Modified && ev.Object.(*RawPod).DeletionTimestamp != nil
			}) {
				t.Error("no update with the graceful deletion's timestamp")
			}
		})
	}
}

// A status patch statuspatch builds for a pod of each release, applied to
// the pod as that release's API server sent it in JSON (as the API server
// applies it to its own), sets the status the node wants and leaves the rest
// of the pod as it was, fields unknown to our client-go included: those of a
// newer release in the metadata, the spec, the status and the status's merged
// lists.
func TestAStatusPatchOfEachReleasesPodChangesNothingItDoesNotWrite(t *testing.T) {
	unknown := json.RawMessage(`{"fromANewerRelease":[1,2]}`)
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			for _, c := range []struct {
				file    string
				desired func(p *corev1.Pod) corev1.PodStatus
			}{
				{wirefixtures.PodJSON, func(p *corev1.Pod) corev1.PodStatus {
					return wirefixtures.RunningStatus(p, metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
				}},
				{wirefixtures.EphemeralJSON, failedStatus},
			} {
				original := fixture(t, r, c.file)
				pod := decodedByClientGo[*corev1.Pod](t, original)
				desired := c.desired(pod)
				patch, err := statuspatch.Build(pod.UID, &pod.Status, &desired)
				if err != nil || patch == nil {
					t.Fatalf("%s: the patch: %s, %v", c.file, patch, err)
				}
				applied, err := strategicpatch.StrategicMergePatch(original, patch, corev1.Pod{})
				if err != nil {
					t.Fatalf("%s: applying %s: %v", c.file, patch, err)
				}
				got := decodedByClientGo[*corev1.Pod](t, applied)
				if !apiequality.Semantic.DeepEqual(got.ObjectMeta, pod.ObjectMeta) || !apiequality.Semantic.DeepEqual(got.Spec, pod.Spec) {
					t.Errorf("%s: the patch %s changed the metadata or the spec", c.file, patch)
				}
				if !apiequality.Semantic.DeepEqual(got.Status, desired) {
					t.Errorf("%s: the patch %s made another status than the node's:\n%s", c.file, patch, jsonDiff(got.Status, desired))
				}

				// The same pod with fields of a newer release.
				var doc map[string]any
				if err := json.Unmarshal(original, &doc); err != nil {
					t.Fatal(err)
				}
				paths := [][]string{{"metadata"}, {"spec"}, {"spec", "containers", "0"}, {"status"}}
				if len(pod.Status.Conditions) > 0 {
					paths = append(paths, []string{"status", "conditions", "0"})
				}
				for _, path := range paths {
					jsonAt(t, doc, path)["fromANewerRelease"] = unknown
				}
				newer, err := json.Marshal(doc)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(newer, nil, nil); err != nil {
					t.Fatalf("%s with fields of a newer release: %v", c.file, err)
				}
				applied, err = strategicpatch.StrategicMergePatch(newer, patch, corev1.Pod{})
				if err != nil {
					t.Fatalf("%s with fields of a newer release: applying %s: %v", c.file, patch, err)
				}
				if err := json.Unmarshal(applied, &doc); err != nil {
					t.Fatal(err)
				}
				for _, path := range paths {
					v, err := json.Marshal(jsonAt(t, doc, path)["fromANewerRelease"])
					if err != nil || !bytes.Equal(v, unknown) {
						t.Errorf("%s: the patch %s left %v of a newer release's field at %v", c.file, patch, string(v), path)
					}
				}
			}
		})
	}
}

// failedStatus is the status a node reports for the running pod p whose app
// container failed, with its ephemeral container not run (as the pod
// controller reports one its provider cannot run).
func failedStatus(p *corev1.Pod) corev1.PodStatus {
	s := *p.Status.DeepCopy()
	now := metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Phase = corev1.PodFailed
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionFalse, "PodFailed", "", now
		}
	}
	for i := range s.ContainerStatuses {
		c := &s.ContainerStatuses[i]
		c.Ready, c.Started = false, ptr.To(false)
		var started metav1.Time
		if c.State.Running != nil {
			started = c.State.Running.StartedAt
		}
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			StartedAt: started, FinishedAt: now, ContainerID: c.ContainerID}}
	}
	for _, ec := range p.Spec.EphemeralContainers {
		s.EphemeralContainerStatuses = append(s.EphemeralContainerStatuses, corev1.ContainerStatus{Name: ec.Name, Image: ec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "EphemeralContainersNotSupported"}}})
	}
	return s
}

// jsonDiff shows where got and want differ, as the lines of their indented
// JSON from the first that differs; JSON omits what Semantic.DeepEqual
// ignores too (nil and empty lists), so the lines may be equal.
func jsonDiff(got, want any) string {
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	gl, wl := bytes.Split(g, []byte("\n")), bytes.Split(w, []byte("\n"))
	i := 0
	for i < len(gl) && i < len(wl) && bytes.Equal(gl[i], wl[i]) {
		i++
	}
	if i == len(gl) && i == len(wl) {
		return "(the same in JSON)"
	}
	from := max(i-3, 0)
	cut := func(l [][]byte) string { return string(bytes.Join(l[from:min(i+5, len(l))], []byte("\n"))) }
	return "got:\n" + cut(gl) + "\nwant:\n" + cut(wl)
}

// jsonAt is the object at path in doc (a list's element by its index).
func jsonAt(t *testing.T, doc map[string]any, path []string) map[string]any {
	t.Helper()
	var at any = doc
	for _, step := range path {
		switch v := at.(type) {
		case map[string]any:
			at = v[step]
		case []any:
			var i int
			if err := json.Unmarshal([]byte(step), &i); err != nil || i >= len(v) {
				t.Fatalf("no %v in the pod", path)
			}
			at = v[i]
		}
	}
	m, ok := at.(map[string]any)
	if !ok {
		t.Fatalf("no object at %v in the pod", path)
	}
	return m
}

// Unknown fields: numbers no release uses, one a message, one a varint.
const (
	newerMessageField protowire.Number = 4242
	newerVarintField  protowire.Number = 4243
)

// newerFields are a message field and a varint field of a newer release,
// distinct at each place they are put.
func newerFields(at string) []byte {
	b := protowire.AppendTag(nil, newerMessageField, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("a field of a newer release in the "+at))
	b = protowire.AppendTag(b, newerVarintField, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(len(at)))
}

// appendAt returns msg with extra appended to the message at path: each step
// the first length-delimited field of that number in the message before.
func appendAt(t *testing.T, msg []byte, path []protowire.Number, extra []byte) []byte {
	t.Helper()
	if len(path) == 0 {
		return append(slices.Clone(msg), extra...)
	}
	var out []byte
	found := false
	apiwire.EachField(msg, func(num protowire.Number, whole []byte) bool {
		if num != path[0] || found || !apiwire.IsBytes(whole) {
			out = append(out, whole...)
			return true
		}
		found = true
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, appendAt(t, apiwire.Value(whole), path[1:], extra))
		return true
	})
	if !found {
		t.Fatalf("no field %d to append to", path[0])
	}
	return out
}

// Field numbers of the envelope (runtime.Unknown) and of the pod's parts
// that the test puts newer fields in; the ones fields.go has are checked by
// fields_test.go.
const (
	envelopeRawField      = 2
	statusContainersField = 8  // PodStatus.containerStatuses
	watchEventNewerField  = 3  // none in metav1.WatchEvent
	envelopeNewerField    = 99 // none in runtime.Unknown
)

// A pod of each release with fields of a newer one (unknown field numbers in
// the envelope, the pod, its metadata, spec, status, a container and a
// container status, in a watch event with a field of its own) reads without
// error, as the same pod without them; the cached pod keeps them, its
// fingerprints see them, and the status patch written from it is the one
// written from the pod without them: nothing of them is re-sent, so nothing of
// them is undone.
func TestAPodWithFieldsOfANewerReleaseReadsAndKeepsThem(t *testing.T) {
	magic := []byte("k8s\x00")
	for _, r := range releases(t) {
		t.Run(r.KubernetesVersion, func(t *testing.T) {
			data := fixture(t, r, wirefixtures.EphemeralProtobuf)
			if !bytes.HasPrefix(data, magic) {
				t.Fatalf("%s is not a protobuf envelope", wirefixtures.EphemeralProtobuf)
			}
			envelope := data[len(magic):]
			places := []struct {
				at   string
				path []protowire.Number
			}{
				{"envelope", nil},
				{"pod", []protowire.Number{envelopeRawField}},
				{"metadata", []protowire.Number{envelopeRawField, podMetadataField}},
				{"spec", []protowire.Number{envelopeRawField, podSpecField}},
				{"a container", []protowire.Number{envelopeRawField, podSpecField, specContainersField}},
				{"status", []protowire.Number{envelopeRawField, podStatusField}},
				{"container status", []protowire.Number{envelopeRawField, podStatusField, statusContainersField}},
			}
			for _, p := range places {
				extra := newerFields(p.at)
				if p.path == nil {
					extra = protowire.AppendTag(nil, envelopeNewerField, protowire.BytesType)
					extra = protowire.AppendBytes(extra, []byte("a field of a newer release in the envelope"))
				}
				envelope = appendAt(t, envelope, p.path, extra)
			}
			newer := append(slices.Clone(magic), envelope...)

			want := decodedByClientGo[*corev1.Pod](t, data)
			if got := decodedByClientGo[*corev1.Pod](t, newer); !apiequality.Semantic.DeepEqual(got, want) {
				t.Fatalf("client-go reads the newer pod otherwise:\n%s", jsonDiff(got, want))
			}
			rp := decodedRaw[*RawPod](t, newer)
			readsAsClientGo(t, "newer", rp, want)

			// Through the watch, in an event with a field of its own.
			ev := metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: newer}}
			frame, err := ev.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			frame = protowire.AppendTag(frame, watchEventNewerField, protowire.BytesType)
			frame = protowire.AppendBytes(frame, []byte("a field of a newer release in the event"))
			var got metav1.WatchEvent
			if _, _, err := (watchEventDecoder{protobufSerializer().StreamSerializer.Serializer}).Decode(frame, nil, &got); err != nil ||
				got.Type != ev.Type || !bytes.Equal(got.Object.Raw, newer) {
				t.Fatalf("the watch event reads as %s with %d bytes, %v", got.Type, len(got.Object.Raw), err)
			}
			readsAsClientGo(t, "newer, watched", decodedRaw[*RawPod](t, got.Object.Raw), want)

			// Kept, and seen by the fingerprints.
			cached, plain := fromRaw(rp), fromRaw(decodedRaw[*RawPod](t, data))
			if err := podpack.UnpackEncoded(cached.packedBytes(), func(raw []byte) error {
				for _, p := range places[1:] {
					if !bytes.Contains(raw, newerFields(p.at)) {
						t.Errorf("the cached pod lost the newer fields of the %s", p.at)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if cached.StatusHash() == plain.StatusHash() || cached.SpecHash() == plain.SpecHash() {
				t.Errorf("the fingerprints do not see the newer fields: status %x and %x, spec %x and %x",
					cached.StatusHash(), plain.StatusHash(), cached.SpecHash(), plain.SpecHash())
			}

			// What the node writes back is the same with or without them.
			decoded, err := cached.Decode()
			if err != nil {
				t.Fatal(err)
			}
			desired := failedStatus(decoded)
			withNewer, err := statuspatch.Build(decoded.UID, &decoded.Status, &desired)
			if err != nil {
				t.Fatal(err)
			}
			without, err := statuspatch.Build(want.UID, &want.Status, &desired)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(withNewer, without) {
				t.Errorf("the status patch of the newer pod is\n%s\nof the pod without its newer fields\n%s", withNewer, without)
			}
		})
	}
}
