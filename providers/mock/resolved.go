package mock

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/compact/tokenpack"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
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
	volumes := keptVolumes(rp.Volumes, rp.Pod.Spec.Volumes)
	key := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	old := p.lookupLocked(key, p.clock.Now())
	if old == nil || old.uid != rp.Pod.UID {
		p.mu.Unlock()
		return providerutil.PodNotFound("mock", rp.Pod.Namespace, rp.Pod.Name)
	}
	rec := *old // records never change once stored
	rec.resolution.volumes, rec.resolved = volumes, true
	p.pods[key] = &rec
	count(&p.volumeCalls, key, 1)
	p.mu.Unlock()
	p.log.Debug("pod volumes updated", "pod", key)
	return nil
}

// keptResolution is what the mock keeps of a ResolvedPod: everything but the pod,
// which the pod's record holds. It is kept for every pod the mock runs, so it is
// smaller than a ResolvedPod: the volumes are a slice, not a map (a map of one
// entry costs about 250 bytes), and their files are kept compactly (keptVolume);
// the pull credentials, which most pods have none of, by pointer.
type keptResolution struct {
	env             map[string][]corev1.EnvVar
	volumes         []keptVolume
	pullCredentials *[]provider.RegistryCredential
}

// keptVolume is one resolved volume: which of the pod's volumes it is, the
// layout of its files, and its service-account tokens.
//
// The volume is named by its index in the pod's spec, which the record
// holds: the name of a token volume is the pod's own (kube-api-access-<random>),
// 24 bytes more a pod. A volume the spec does not name, which no node hands
// over, keeps its name at the head of its layout (index -1).
//
// A node's pods mostly mount the same files but their tokens (the
// kube-api-access volume: the token, the cluster's CA bundle, the namespace), so
// what is not a token (paths, modes, the other files' data) is kept once for all
// volumes alike: the layout, a string made canonical with unique.Make, which the
// runtime frees when no volume uses it. Each volume keeps its name and its tokens,
// packed (internal/compact/tokenpack). Kept as a slice of files, a pod's token volume
// took about 220 bytes, against about 80 so.
type keptVolume struct {
	index  int
	layout unique.Handle[string]
	// tokens are the data of the files the layout marks as tokens, in its order.
	tokens []tokenpack.Token
}

// A layout is, for each file in turn: the path (uvarint length, bytes), the
// mode (uvarint), and either layoutToken, the data being the volume's next
// token, or layoutData and the data (uvarint length, bytes).
const (
	layoutToken = 0
	layoutData  = 1
)

// keptVolumes returns volumes as kept, in no particular order: spec are the
// volumes of the pod's spec.
func keptVolumes(volumes map[string]*provider.VolumeContents, spec []corev1.Volume) []keptVolume {
	if len(volumes) == 0 {
		return nil
	}
	out := make([]keptVolume, 0, len(volumes))
	var layout []byte
	for name, v := range volumes {
		if v == nil {
			continue
		}
		var tokens []tokenpack.Token
		layout = layout[:0]
		index := slices.IndexFunc(spec, func(sv corev1.Volume) bool { return sv.Name == name })
		if index < 0 {
			layout = binary.AppendUvarint(layout, uint64(len(name)))
			layout = append(layout, name...)
		}
		for _, f := range v.Files {
			layout = binary.AppendUvarint(layout, uint64(len(f.Path)))
			layout = append(layout, f.Path...)
			layout = binary.AppendUvarint(layout, uint64(uint32(f.Mode)))
			if t := tokenpack.Pack(f.Data); t.Packed() {
				layout = append(layout, layoutToken)
				tokens = append(tokens, t)
				continue
			}
			layout = append(layout, layoutData)
			layout = binary.AppendUvarint(layout, uint64(len(f.Data)))
			layout = append(layout, f.Data...)
		}
		out = append(out, keptVolume{index: index, layout: unique.Make(string(layout)), tokens: slices.Clip(tokens)})
	}
	return out
}

// files returns the volume's name, spec being the pod's volumes, and its
// files. Paths and the data of files that are no token are the layout's,
// shared: read-only for everyone, as the provider contract has all resolved
// data.
func (v keptVolume) files(spec []corev1.Volume) (string, []provider.VolumeFile) {
	layout := v.layout.Value()
	var name string
	if v.index >= 0 && v.index < len(spec) {
		name = spec[v.index].Name
	} else {
		name, layout = layoutString(layout)
	}
	var files []provider.VolumeFile
	tokens := v.tokens
	for len(layout) > 0 {
		var f provider.VolumeFile
		f.Path, layout = layoutString(layout)
		mode, n := binary.Uvarint([]byte(layout[:min(len(layout), binary.MaxVarintLen32)]))
		f.Mode, layout = int32(uint32(mode)), layout[n:]
		kind := layout[0]
		layout = layout[1:]
		if kind == layoutToken {
			f.Data, tokens = tokens[0].Bytes(), tokens[1:]
		} else {
			var data string
			data, layout = layoutString(layout)
			f.Data = unsafe.Slice(unsafe.StringData(data), len(data))
		}
		files = append(files, f)
	}
	return name, files
}

// layoutString reads a uvarint length and that many bytes from a layout, and
// returns them and the rest. Layouts are the mock's own (keptVolumes): a
// malformed one is a bug, and panics.
func layoutString(layout string) (s, rest string) {
	n, w := binary.Uvarint([]byte(layout[:min(len(layout), binary.MaxVarintLen64)]))
	if w <= 0 {
		panic("mock: a malformed volume layout")
	}
	end := w + int(n)
	return layout[w:end], layout[end:]
}

// withPod returns the resolution with the pod of rec. The environment and the
// files not packed are shared, not copied: they are read-only for everyone.
func (k *keptResolution) withPod(rec *podRecord) *provider.ResolvedPod {
	rp := &provider.ResolvedPod{Pod: rec.pod(), Env: k.env}
	if k.pullCredentials != nil {
		rp.PullCredentials = *k.pullCredentials
	}
	if k.volumes != nil {
		rp.Volumes = make(map[string]*provider.VolumeContents, len(k.volumes))
		for _, v := range k.volumes {
			name, files := v.files(rp.Pod.Spec.Volumes)
			rp.Volumes[name] = &provider.VolumeContents{Files: files}
		}
	}
	return rp
}

// keep returns what the mock keeps of rp, without copying its environment or
// files not packed: they are read-only for everyone (provider contract), and its
// pod is in the pod's record.
func keep(rp *provider.ResolvedPod) *keptResolution {
	k := &keptResolution{env: rp.Env, volumes: keptVolumes(rp.Volumes, rp.Pod.Spec.Volumes)}
	if rp.PullCredentials != nil {
		creds := rp.PullCredentials
		k.pullCredentials = &creds
	}
	return k
}

// Resolved returns a copy of the last resolved pod given for namespace/name, or nil.
// It is meant for tests.
func (p *Provider) Resolved(namespace, name string) *provider.ResolvedPod {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.pods[providerutil.PodKey(namespace, name)]
	if rec == nil || !rec.resolved {
		return nil
	}
	return copyResolved(rec.resolution.withPod(rec))
}

// VolumeUpdates returns how many times UpdatePodVolumes succeeded for
// namespace/name. It is meant for tests.
func (p *Provider) VolumeUpdates(namespace, name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.volumeCalls[providerutil.PodKey(namespace, name)]
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
