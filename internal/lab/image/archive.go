package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations on the image's entry in the layout's index. containerd names an
// imported image after io.containerd.image.name; the OCI specification's ref.name
// carries the same reference for other tools.
const (
	containerdImageName = "io.containerd.image.name"
	ociRefName          = "org.opencontainers.image.ref.name"
)

// WriteArchive writes img as an OCI image layout, tagged ref, in a tar archive at
// path. The archive is as reproducible as the image: its entries are sorted and
// carry no times or owners of this machine. Like `docker save` since Docker 25,
// it also carries a manifest.json naming the layout's blobs, so that tools that
// read Docker's archives (crane push, docker load) take it as well as those that
// read OCI layouts (ctr images import, skopeo).
func WriteArchive(img v1.Image, ref, path string) error {
	return writeLayout(ref, path, func(lp layout.Path, o layout.Option) error {
		if err := lp.AppendImage(img, o); err != nil {
			return err
		}
		return writeDockerManifest(string(lp), img, ref)
	})
}

// dockerManifest is an entry of a Docker archive's manifest.json: the paths of
// the image's configuration and layers in the archive, and its tags.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// writeDockerManifest writes manifest.json into the layout at dir for img,
// whose blobs the layout already holds.
func writeDockerManifest(dir string, img v1.Image, ref string) error {
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	m := dockerManifest{Config: blob(cfg), RepoTags: []string{ref}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		m.Layers = append(m.Layers, blob(d))
	}
	b, err := json.Marshal([]dockerManifest{m})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
}

// WriteIndexArchive writes idx, a multi-platform image, as an OCI image layout
// tagged ref in a tar archive at path, as reproducibly as WriteArchive.
func WriteIndexArchive(idx v1.ImageIndex, ref, path string) error {
	return writeLayout(ref, path, func(lp layout.Path, o layout.Option) error { return lp.AppendIndex(idx, o) })
}

// writeLayout writes an OCI image layout to which add adds the image, with
// the annotations that tag it ref, as a tar archive at path.
func writeLayout(ref, path string, add func(layout.Path, layout.Option) error) error {
	r, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "vkubelet-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := add(lp, layout.WithAnnotations(map[string]string{
		containerdImageName: r.Name(),
		ociRefName:          r.Name(),
	})); err != nil {
		return err
	}
	return tarDir(dir, path)
}

func tarDir(dir, path string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			f.Close()
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(n), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				f.Close()
				return err
			}
			continue
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if err := copyFile(tw, filepath.Join(dir, n)); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
