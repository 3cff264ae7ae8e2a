package mock

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/tokenpack"
	"github.com/vkubelet/vkubelet/provider"
)

// CreateResolvedPod is CreatePod; the mock also keeps the resolved pod, so that
// exec can show its environment and volume files (see RunInContainer).
func (p *Provider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return p.createPod(ctx, rp.Pod, keep(rp))
}

// UpdateResolvedPod is UpdatePod, keeping the resolved pod like CreateResolvedPod.
func (p *Provider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return p.updatePod(ctx, rp.Pod, keep(rp))
}

// UpdatePodVolumes replaces the volume files of a pod the mock runs and counts the
// call (VolumeUpdates).
func (p *Provider) UpdatePodVolumes(ctx context.Context, rp *provider.ResolvedPod) error {
	volumes := keptVolumes(rp.Volumes)
	key := podKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	old := p.lookupLocked(key, p.clock.Now())
	if old == nil || old.uid != rp.Pod.UID {
		p.mu.Unlock()
		return notFound(rp.Pod.Namespace, rp.Pod.Name)
	}
	rec := *old // records never change once stored
	resolution := keptResolution{}
	if old.resolution != nil {
		resolution = *old.resolution
	}
	resolution.volumes = volumes
	rec.resolution = &resolution
	p.pods[key] = &rec
	p.volumeCalls[key]++
	p.mu.Unlock()
	p.log.Debug("pod volumes updated", "pod", key)
	return nil
}

// keptResolution is what the mock keeps of a ResolvedPod: everything but the pod,
// which the pod's record holds. It is kept for every pod the mock runs, so it is
// smaller than a ResolvedPod: the volumes are a slice, not a map (a map of one
// entry costs about 250 bytes), and their files are packed (keptFile).
type keptResolution struct {
	env             map[string][]corev1.EnvVar
	volumes         []keptVolume
	pullCredentials []provider.RegistryCredential
}

// keptVolume is one resolved volume: its name and files.
type keptVolume struct {
	name  string
	files []keptFile
}

// keptFile is a volume file as kept: a service-account token packed (a third
// of its bytes, internal/tokenpack), any other file's data shared with the
// resolver's (read-only for everyone, per the provider contract).
type keptFile struct {
	path string
	mode int32
	data tokenpack.Token
}

// keptVolumes returns volumes as kept, in no particular order.
func keptVolumes(volumes map[string]*provider.VolumeContents) []keptVolume {
	if len(volumes) == 0 {
		return nil
	}
	out := make([]keptVolume, 0, len(volumes))
	for name, v := range volumes {
		if v == nil {
			continue
		}
		files := make([]keptFile, len(v.Files))
		for i, f := range v.Files {
			// Paths are the same in many pods ("token", "ca.crt"): one
			// copy for all of them (unique.Make).
			files[i] = keptFile{path: unique.Make(f.Path).Value(), mode: f.Mode, data: tokenpack.Pack(f.Data)}
		}
		out = append(out, keptVolume{name: name, files: files})
	}
	return out
}

// withPod returns the resolution with the pod of rec. The environment and the
// files not packed are shared, not copied: they are read-only for everyone.
func (k *keptResolution) withPod(rec *podRecord) *provider.ResolvedPod {
	rp := &provider.ResolvedPod{Pod: rec.pod(), Env: k.env, PullCredentials: k.pullCredentials}
	if k.volumes != nil {
		rp.Volumes = make(map[string]*provider.VolumeContents, len(k.volumes))
		for _, v := range k.volumes {
			files := make([]provider.VolumeFile, len(v.files))
			for i, f := range v.files {
				files[i] = provider.VolumeFile{Path: f.path, Mode: f.mode, Data: f.data.Bytes()}
			}
			rp.Volumes[v.name] = &provider.VolumeContents{Files: files}
		}
	}
	return rp
}

// keep returns what the mock keeps of rp, without copying its environment or
// files not packed: they are read-only for everyone (provider contract), and its
// pod is in the pod's record.
func keep(rp *provider.ResolvedPod) *keptResolution {
	return &keptResolution{env: rp.Env, volumes: keptVolumes(rp.Volumes), pullCredentials: rp.PullCredentials}
}

// Resolved returns a copy of the last resolved pod given for namespace/name, or nil.
// It is meant for tests.
func (p *Provider) Resolved(namespace, name string) *provider.ResolvedPod {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.pods[podKey(namespace, name)]
	if rec == nil || rec.resolution == nil {
		return nil
	}
	return copyResolved(rec.resolution.withPod(rec))
}

// VolumeUpdates returns how many times UpdatePodVolumes succeeded for
// namespace/name. It is meant for tests.
func (p *Provider) VolumeUpdates(namespace, name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.volumeCalls[podKey(namespace, name)]
}

func copyResolved(rp *provider.ResolvedPod) *provider.ResolvedPod {
	out := &provider.ResolvedPod{Pod: rp.Pod.DeepCopy()}
	if rp.Env != nil {
		out.Env = make(map[string][]corev1.EnvVar, len(rp.Env))
		for k, v := range rp.Env {
			out.Env[k] = append([]corev1.EnvVar(nil), v...)
		}
	}
	if rp.Volumes != nil {
		out.Volumes = make(map[string]*provider.VolumeContents, len(rp.Volumes))
		for k, v := range rp.Volumes {
			vc := &provider.VolumeContents{Files: make([]provider.VolumeFile, len(v.Files))}
			for i, f := range v.Files {
				vc.Files[i] = provider.VolumeFile{Path: f.Path, Data: append([]byte(nil), f.Data...), Mode: f.Mode}
			}
			out.Volumes[k] = vc
		}
	}
	out.PullCredentials = append([]provider.RegistryCredential(nil), rp.PullCredentials...)
	return out
}

// scriptedOutput is what the scripted commands `env` and `cat <file>` print for a
// container of a resolved pod: the resolved environment, one NAME=value per line as
// env(1) does, or the file of a volume mounted in the container. ok is false for any
// other command (or a pod given without resolution); a missing file is an error.
func scriptedOutput(rp *provider.ResolvedPod, container string, cmd []string) (out []byte, ok bool, err error) {
	if rp == nil {
		return nil, false, nil
	}
	switch {
	case len(cmd) == 1 && cmd[0] == "env":
		var b strings.Builder
		for _, e := range rp.Env[container] {
			fmt.Fprintf(&b, "%s=%s\n", e.Name, e.Value)
		}
		return []byte(b.String()), true, nil
	case len(cmd) == 2 && cmd[0] == "cat":
		if data, found := volumeFile(rp, container, cmd[1]); found {
			return data, true, nil
		}
		return nil, true, fmt.Errorf("cat: %s: No such file or directory", cmd[1])
	}
	return nil, false, nil
}

// volumeFile finds the file at absolute path file among the volumes the container
// mounts.
func volumeFile(rp *provider.ResolvedPod, container, file string) ([]byte, bool) {
	file = path.Clean(file)
	var c *corev1.Container
	for _, cs := range [][]corev1.Container{rp.Pod.Spec.Containers, rp.Pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == container {
				c = &cs[i]
			}
		}
	}
	if c == nil {
		return nil, false
	}
	for _, m := range c.VolumeMounts {
		mount := path.Clean(m.MountPath)
		rel, ok := strings.CutPrefix(file, mount+"/")
		if m.SubPath != "" {
			if file == mount {
				rel, ok = m.SubPath, true
			} else if ok {
				rel = path.Join(m.SubPath, rel)
			}
		}
		if !ok || rp.Volumes[m.Name] == nil {
			continue
		}
		for _, f := range rp.Volumes[m.Name].Files {
			if f.Path == rel {
				return f.Data, true
			}
		}
	}
	return nil, false
}

// writeScripted writes the output of a scripted command, or its error to stderr
// (stdout with a TTY), and returns the exit status.
func writeScripted(stdout io.Writer, attach provider.AttachIO, out []byte, err error) error {
	if err == nil {
		_, werr := stdout.Write(out)
		return werr
	}
	var w io.Writer = stdout
	if attach != nil && attach.Stderr() != nil {
		w = attach.Stderr()
	}
	_, _ = io.WriteString(w, err.Error()+"\n")
	return &provider.ExecError{ExitCode: 1}
}
