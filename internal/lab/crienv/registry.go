package crienv

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// This file holds the in-process registry on 127.0.0.1 and the images it serves:
// busybox (also as Docker Hub's library/busybox), a copy only PrivateUser may pull,
// and the pause image, all built from Debian's busybox-static.

// The credentials the registry asks for images under private/.
const (
	PrivateUser     = "puller"
	PrivatePassword = "s3cret"
)

// serveImages starts the registry and pushes the images; on failure it stops
// what it started.
func (e *Env) serveImages() error {
	if err := e.startRegistry(); err != nil {
		e.Stop()
		return err
	}
	if err := e.pushImages(); err != nil {
		e.Stop()
		return err
	}
	return nil
}

func (e *Env) startRegistry() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("crienv: registry listen: %w", err)
	}
	e.Registry = ln.Addr().String()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(PrivateUser+":"+PrivatePassword))
	e.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Pulls of private/ need the credentials; pushes (from this process) do not.
			if strings.HasPrefix(r.URL.Path, "/v2/private/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
				r.Header.Get("Authorization") != want && r.Header.Get("X-Crienv-Push") == "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="crienv"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = e.server.Serve(ln) }()
	return nil
}

// busyboxLayer is a root filesystem with /bin/busybox and a link for each applet.
func busyboxLayer() (v1.Layer, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("crienv: busybox-static missing (run scripts/setup.sh): %w", err)
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("crienv: busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(0, 0)
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "var/www"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: now}); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":          "root:x:0:\nnogroup:x:65534:\n",
		"var/www/index.html": "hello from busybox\n",
	}
	for n, data := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bb); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func image(layer v1.Layer, entrypoint, cmd []string) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Cmd = entrypoint, cmd
	cf.Config.Env = []string{"PATH=/bin"}
	return mutate.ConfigFile(img, cf)
}

func (e *Env) pushImages() error {
	layer, err := busyboxLayer()
	if err != nil {
		return err
	}
	busybox, err := image(layer, nil, []string{"/bin/sh"})
	if err != nil {
		return err
	}
	pause, err := image(layer, []string{"/bin/sleep", "2147483647"}, nil)
	if err != nil {
		return err
	}
	e.Busybox = e.Registry + "/busybox:1"
	e.Busybox2 = e.Registry + "/busybox:2"
	e.PrivateBusybox = e.Registry + "/private/busybox:1"
	e.Pause = e.Registry + "/pause:1"
	// docker.io/library/busybox:latest, which containerd asks this registry for
	// (certs.d/docker.io/hosts.toml).
	hubBusybox := e.Registry + "/library/busybox:latest"
	push := remote.WithTransport(headerTransport{})
	for ref, img := range map[string]v1.Image{e.Busybox: busybox, e.Busybox2: busybox, e.PrivateBusybox: busybox, e.Pause: pause, hubBusybox: busybox} {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(r, img, push); err != nil {
			return fmt.Errorf("crienv: push %s: %w", ref, err)
		}
	}
	return nil
}

// headerTransport marks this process's own requests, which bypass the auth check.
type headerTransport struct{}

func (headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Crienv-Push", "1")
	return http.DefaultTransport.RoundTrip(r)
}
