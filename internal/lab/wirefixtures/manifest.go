package wirefixtures

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The files of a release's directory, each the body of one answer of its API
// server, as sent, gzipped: the bytes are the API server's, and a release's
// fixtures take tens of KiB rather than a hundred and more (a pod with its
// managed fields encodes to about 10 KiB, and every watch event carries one).
const (
	// PodProtobuf and PodJSON are a GET of the rich pod as created.
	PodProtobuf = "pod.pb.gz"
	PodJSON     = "pod.json.gz"
	// ListProtobuf is the node's list of its pods (podwire.Client.List).
	ListProtobuf = "list.pb.gz"
	// WatchProtobuf is the body of the node's pod watch (podwire.Client.Watch)
	// from before the pod was created: ADDED, MODIFIED (the status patch, the
	// ephemeral container, the graceful delete), DELETED and a BOOKMARK, as
	// length-prefixed frames.
	WatchProtobuf = "watch.pb.gz"
	// WatchListProtobuf is the body of a streamed list (sendInitialEvents), as
	// client-go's reflector asks for one: the pod, then the BOOKMARK that ends
	// the initial events; or the API server's refusal (a Status, Status not 200).
	WatchListProtobuf = "watchlist.pb.gz"
	// PatchStatusProtobuf answers the status patch statuspatch built
	// (podwire.Client.PatchStatus): the pod as stored.
	PatchStatusProtobuf = "patch-status.pb.gz"
	// EphemeralProtobuf and EphemeralJSON are a GET of the pod once an
	// ephemeral container was added through the ephemeralcontainers
	// subresource, after the status patch.
	EphemeralProtobuf = "ephemeral.pb.gz"
	EphemeralJSON     = "ephemeral.json.gz"
	// TokenProtobuf and TokenJSON answer a TokenRequest bound to the pod, sent
	// as the node's clientset sends it configured for protobuf and for JSON
	// (--kube-api-content-type).
	TokenProtobuf = "token.pb.gz"
	TokenJSON     = "token.json.gz"
)

// ManifestFile is the manifest's name in a release's directory.
const ManifestFile = "manifest.json"

// Manifest says what a release's directory holds.
type Manifest struct {
	// KubernetesVersion is the release the lab ran; ServerVersion is the
	// gitVersion its /version answered.
	KubernetesVersion string `json:"kubernetesVersion"`
	ServerVersion     string `json:"serverVersion"`
	// Namespace, Pod and Node name the rich pod and the node it is bound to;
	// ServiceAccount is the one its tokens are of.
	Namespace      string `json:"namespace"`
	Pod            string `json:"pod"`
	Node           string `json:"node"`
	ServiceAccount string `json:"serviceAccount"`
	// Omitted names the parts of the rich pod this release refused: the pod
	// was recorded without them. Dropped names those it accepted but did not
	// keep (fields behind a feature gate that is off).
	Omitted   []string   `json:"omitted,omitempty"`
	Dropped   []string   `json:"dropped,omitempty"`
	Exchanges []Exchange `json:"exchanges"`
}

// Exchange is one request and its answer, whose body is File.
type Exchange struct {
	File string `json:"file"`
	// Method and Path (with its query) are the request's, Accept and
	// ContentType (of its body, if any) its headers.
	Method      string `json:"method"`
	Path        string `json:"path"`
	Accept      string `json:"accept"`
	ContentType string `json:"contentType,omitempty"`
	// Status and ResponseContentType are the answer's.
	Status              int    `json:"status"`
	ResponseContentType string `json:"responseContentType"`
	// Events are the types of a watch's events, in order.
	Events []string `json:"events,omitempty"`
}

// Exchange returns the exchange whose answer is file.
func (m *Manifest) Exchange(file string) (Exchange, bool) {
	for _, e := range m.Exchanges {
		if e.File == file {
			return e, true
		}
	}
	return Exchange{}, false
}

// Release is the directory of one release's fixtures.
type Release struct {
	Dir string
	Manifest
}

// Read returns the body of the answer recorded in file, as the API server
// sent it.
func (r Release) Read(file string) ([]byte, error) {
	f, err := os.Open(filepath.Join(r.Dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	return b, nil
}

// writeBody writes body to path, gzipped as Read reads it: with no name or
// time in its header, so that the same body makes the same file.
func writeBody(path string, body []byte) error {
	var b bytes.Buffer
	z, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := z.Write(body); err != nil {
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Load reads every release directory under dir (one per subdirectory with a
// manifest), oldest release first.
func Load(dir string) ([]Release, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", ManifestFile))
	if err != nil {
		return nil, err
	}
	var out []Release
	for _, p := range paths {
		if strings.HasPrefix(filepath.Base(filepath.Dir(p)), ".") {
			continue // a recording under way (Record)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r := Release{Dir: filepath.Dir(p)}
		if err := json.Unmarshal(b, &r.Manifest); err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		if want := filepath.Base(r.Dir); r.KubernetesVersion != want {
			return nil, fmt.Errorf("%s: the fixtures of %s in the directory of %s", p, r.KubernetesVersion, want)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return releaseLess(out[i].KubernetesVersion, out[j].KubernetesVersion) })
	return out, nil
}

// releaseLess orders releases v1.<minor>.<patch> numerically.
func releaseLess(a, b string) bool {
	var am, ap, bm, bp int
	_, _ = fmt.Sscanf(a, "v1.%d.%d", &am, &ap)
	_, _ = fmt.Sscanf(b, "v1.%d.%d", &bm, &bp)
	if am != bm {
		return am < bm
	}
	return ap < bp
}
