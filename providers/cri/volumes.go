package cri

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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
		mode := os.FileMode(0o777)
		if vol.EmptyDir.Medium == corev1.StorageMediumMemory {
			if err := p.mountTmpfs(dir, memoryVolumeSize(pod, vol.EmptyDir, p.nodeMemory())); err != nil {
				return "", false, fmt.Errorf("emptyDir %q: %w", vol.Name, err)
			}
			// A tmpfs's own root mode, sticky, which the kubelet's keeps.
			mode |= os.ModeSticky
		}
		if err := os.Chmod(dir, mode); err != nil {
			return "", false, err
		}
		return dir, false, setVolumeOwnership(dir, fsGroup(pod), false)
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
		dir := p.volumeDir(pod, v.Name)
		if err := writeAtomic(dir, files); err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if err := setVolumeOwnership(dir, fsGroup(pod), true); err != nil {
			return fmt.Errorf("volume %q: fsGroup: %w", v.Name, err)
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

// fsGroup is the pod's fsGroup, or nil.
func fsGroup(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// setVolumeOwnership gives the volume at dir to the pod's fsGroup, as the
// kubelet does when it sets a volume up: every entry's group becomes gid, each
// file gains the group's read (and, for a volume the pod may write, write)
// permission, each directory also the group's search permission and setgid,
// so that what the containers create there belongs to the group too. The
// processes have gid as a supplemental group (supplementalGroups): a container
// running as any user reads a Secret's files with mode 0400. nil: no fsGroup,
// nothing changes.
func setVolumeOwnership(dir string, gid *int64, readOnly bool) error {
	if gid == nil {
		return nil
	}
	mask := os.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(*gid)); err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		mode := info.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSticky) | mask
		if info.IsDir() {
			mode |= os.ModeSetgid | 0o110
		}
		return os.Chmod(path, mode)
	})
}

// memoryVolumeSize is the size of the tmpfs of a memory-backed emptyDir, as the
// kubelet sizes it: the node's memory, or the pod's memory limit if lower (when
// all its containers have one), or the volume's sizeLimit if lower still. 0, for
// a node whose memory is unknown and nothing else set, leaves the kernel's
// default (half the memory).
func memoryVolumeSize(pod *corev1.Pod, ed *corev1.EmptyDirVolumeSource, nodeMemory int64) int64 {
	size := nodeMemory
	lower := func(v int64) {
		if v > 0 && (size <= 0 || v <= size) {
			size = v
		}
	}
	lower(podMemoryLimit(pod))
	if ed.SizeLimit != nil {
		lower(ed.SizeLimit.Value())
	}
	return size
}

// podMemoryLimit is the most memory the pod's containers may use together, as
// the kubelet computes its cgroup's limit: the app containers and sidecars at
// once, or an init container with the sidecars started before it, whichever is
// more. 0 when a container has no memory limit.
func podMemoryLimit(pod *corev1.Pod) int64 {
	limit := func(c *corev1.Container) (int64, bool) {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		return q.Value(), ok
	}
	var sidecars, initMax int64
	for i := range pod.Spec.InitContainers {
		l, ok := limit(&pod.Spec.InitContainers[i])
		if !ok {
			return 0
		}
		if isSidecar(&pod.Spec.InitContainers[i]) {
			sidecars += l
		}
		initMax = max(initMax, sidecars+l)
	}
	apps := sidecars
	for i := range pod.Spec.Containers {
		l, ok := limit(&pod.Spec.Containers[i])
		if !ok {
			return 0
		}
		apps += l
	}
	return max(apps, initMax)
}

// nodeMemory is the node's memory in bytes, 0 if unknown.
func (p *Provider) nodeMemory() int64 {
	mem, err := memTotal()
	if err != nil {
		return 0
	}
	return int64(mem)
}

// mountTmpfs mounts a tmpfs of size bytes (0: the kernel's default) on dir,
// unless dir is a mount point already (the volume of a container started before).
func (p *Provider) mountTmpfs(dir string, size int64) error {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return err
	}
	if st.Dev != parent.Dev {
		return nil
	}
	opts := ""
	if size > 0 {
		opts = "size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// removePodDir removes the pod's directory, unmounting first what is mounted
// under it (the tmpfs of its memory-backed emptyDirs), deepest first.
func (p *Provider) removePodDir(uid types.UID) error {
	dir := p.podDir(uid)
	mounts, err := mountPointsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, 0); err != nil {
			// Busy: let it go when its last user does.
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s: %w", m, err)
			}
		}
	}
	return os.RemoveAll(dir)
}

// mountPointsUnder lists the mount points at or below dir, deepest first.
func mountPointsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
