package e2econformance

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// cgroupRoot is a cgroup made in every cgroup hierarchy of this machine, the
// root of one kubelet's pod cgroups (its --cgroup-root), which the kubelet
// requires to exist.
type cgroupRoot struct {
	name string   // "/<name>", as the kubelet's configuration gives it
	dirs []string // the cgroup's directory in each hierarchy
}

// makeCgroupRoot makes the cgroup /name in each cgroup hierarchy mounted
// (cgroup v1's, one per controller, or v2's one), cpuset's given its parent's
// CPUs and memory nodes, without which no process may join it.
func makeCgroupRoot(name string) (*cgroupRoot, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	cg := &cgroupRoot{name: "/" + name}
	for _, m := range cgroupMounts(string(mounts)) {
		dir := filepath.Join(m.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			cg.remove()
			return nil, fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		cg.dirs = append(cg.dirs, dir)
		if slices.Contains(m.options, "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(m.dir, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
				}
				if err != nil {
					cg.remove()
					return nil, fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	if len(cg.dirs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy is mounted")
	}
	return cg, nil
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct {
	dir     string
	options []string
}

// cgroupMounts lists the cgroup hierarchies in mounts (/proc/self/mounts).
func cgroupMounts(mounts string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		out = append(out, cgroupMount{dir: f[1], options: strings.Split(f[3], ",")})
	}
	return out
}

// remove removes the cgroup and the cgroups below it, deepest first; a cgroup
// that still holds a process stays.
func (cg *cgroupRoot) remove() {
	if cg == nil {
		return
	}
	for _, dir := range cg.dirs {
		var sub []string
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		for i := len(sub) - 1; i >= 0; i-- {
			_ = os.Remove(sub[i])
		}
	}
}
