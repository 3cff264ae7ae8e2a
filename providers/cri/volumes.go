package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
)

const dataLink = "..data"

func (p *Provider) volumeDir(pod *corev1.Pod, name string) string {
	return filepath.Join(p.podDir(pod.UID), "volumes", name)
}

// hasContents reports whether the volume's files come from the resolved pod.
func hasContents(v *corev1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

// volumeHostPath is the host directory (or file) that backs vol, and whether it must
// be mounted read-only.
func (p *Provider) volumeHostPath(pod *corev1.Pod, vol *corev1.Volume) (string, bool, error) {
	switch {
	case vol.HostPath != nil:
		path := vol.HostPath.Path
		if t := vol.HostPath.Type; t != nil {
			switch *t {
			case corev1.HostPathDirectoryOrCreate:
				if err := os.MkdirAll(path, 0o755); err != nil {
					return "", false, err
				}
			case corev1.HostPathFileOrCreate:
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					return "", false, err
				}
				f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
				if err != nil {
					return "", false, err
				}
				f.Close()
			case corev1.HostPathDirectory, corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
				if _, err := os.Stat(path); err != nil {
					return "", false, fmt.Errorf("hostPath volume %q: %w", vol.Name, err)
				}
			}
		}
		return path, false, nil
	case vol.EmptyDir != nil:
		dir := p.volumeDir(pod, vol.Name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", false, err
		}
		// World-writable whatever the umask, as the kubelet makes it: containers
		// running as another user than root (the vkubelet image's 65532, for
		// one) must write to their emptyDir.
		return dir, false, os.Chmod(dir, 0o777)
	case hasContents(vol):
		dir := p.volumeDir(pod, vol.Name)
		return dir, true, os.MkdirAll(dir, 0o755)
	}
	return "", false, fmt.Errorf("volume %q: unsupported type", vol.Name)
}

// writeVolumes writes the files of the pod's configMap, secret, downwardAPI and
// projected volumes (none for a volume vols lacks).
func (p *Provider) writeVolumes(pod *corev1.Pod, vols map[string]*provider.VolumeContents) error {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !hasContents(v) {
			continue
		}
		var files []provider.VolumeFile
		if vc := vols[v.Name]; vc != nil {
			files = vc.Files
		}
		if err := writeAtomic(p.volumeDir(pod, v.Name), files); err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
	}
	return nil
}

// writeAtomic makes dir hold exactly files, the way the kubelet's AtomicWriter does,
// so that a reader in a container never sees half an update: the files are written
// to a new hidden directory, the ..data symlink is switched to it by a rename, and
// each top-level entry is a symlink through ..data.
func writeAtomic(dir string, files []provider.VolumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	tsName := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.") + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	tsDir, err := os.MkdirTemp(dir, tsName)
	if err != nil {
		return err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return err
	}
	top := map[string]bool{}
	for _, f := range files {
		clean := filepath.Clean(f.Path)
		if filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") {
			return fmt.Errorf("bad file path %q", f.Path)
		}
		top[strings.Split(filepath.ToSlash(clean), "/")[0]] = true
		path := filepath.Join(tsDir, clean)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(f.Mode) & os.ModePerm
		if f.Mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(path, f.Data, mode); err != nil {
			return err
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := e.Name(); !strings.HasPrefix(name, "..") && !top[name] {
			_ = os.RemoveAll(filepath.Join(dir, name))
		}
	}
	if old != "" && old != filepath.Base(tsDir) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
