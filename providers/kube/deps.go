package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/provider"
)

// copyKind says whether a dependency copy is a Secret or a ConfigMap.
type copyKind int

const (
	copySecret copyKind = iota
	copyConfigMap
)

// depCopy is one object the target pod depends on: the files of a volume, the
// environment, or the pull credentials, as a Secret or ConfigMap in the target.
type depCopy struct {
	kind       copyKind
	name       string
	secretType corev1.SecretType
	data       map[string][]byte
}

// translate builds the target pod for rp and the copies it references.
func (m *mapper) translate(rp *provider.ResolvedPod) (*corev1.Pod, []depCopy) {
	src := rp.Pod
	tp := m.targetPod(src)
	var copies []depCopy

	for i := range tp.Spec.Volumes {
		v := &tp.Spec.Volumes[i]
		if v.Secret == nil && v.ConfigMap == nil && v.Projected == nil {
			continue // downwardAPI is resolved by the target itself; other types kept
		}
		kind := copyConfigMap
		if v.Secret != nil || v.Projected != nil {
			kind = copySecret
		}
		var files []provider.VolumeFile
		if c := rp.Volumes[v.Name]; c != nil {
			files = c.Files
		}
		name := nameWithHash(src.Name, "vol-"+v.Name, maxObjectName)
		copies = append(copies, volumeCopy(kind, name, files))
		v.VolumeSource = volumeSource(kind, name, files)
	}

	if env := m.envCopy(src, rp, tp); env != nil {
		copies = append(copies, *env)
	}
	if len(rp.PullCredentials) > 0 {
		name := nameWithHash(src.Name, "pull", maxObjectName)
		copies = append(copies, depCopy{kind: copySecret, name: name, secretType: corev1.SecretTypeDockerConfigJson,
			data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(rp.PullCredentials)}})
		tp.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: name}}
	} else {
		tp.Spec.ImagePullSecrets = nil
	}
	return tp, copies
}

// fileKey is the key of the i-th file in a copy: file paths may hold "/", keys not.
func fileKey(i int) string { return "f" + strconv.Itoa(i) }

func volumeCopy(kind copyKind, name string, files []provider.VolumeFile) depCopy {
	c := depCopy{kind: kind, name: name, secretType: corev1.SecretTypeOpaque, data: map[string][]byte{}}
	for i, f := range files {
		c.data[fileKey(i)] = f.Data
	}
	return c
}

// volumeSource references copy name, one item per file with its path and mode.
func volumeSource(kind copyKind, name string, files []provider.VolumeFile) corev1.VolumeSource {
	items := make([]corev1.KeyToPath, 0, len(files))
	for i, f := range files {
		kp := corev1.KeyToPath{Key: fileKey(i), Path: f.Path}
		if f.Mode != 0 {
			kp.Mode = ptr.To(f.Mode)
		}
		items = append(items, kp)
	}
	if kind == copySecret {
		return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, Items: items}}
	}
	return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items}}
}

// envCopy rewrites the env of tp's containers to the resolved environment: fieldRef
// and resourceFieldRef variables stay as declared (the target resolves them), the
// others come from one Secret, returned, so no value appears in the pod spec.
func (m *mapper) envCopy(src *corev1.Pod, rp *provider.ResolvedPod, tp *corev1.Pod) *depCopy {
	name := nameWithHash(src.Name, "env", maxObjectName)
	data := map[string][]byte{}
	rewrite := func(prefix string, cs []corev1.Container) {
		for ci := range cs {
			c := &cs[ci]
			declared := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				declared[e.Name] = e
			}
			resolved, ok := rp.Env[c.Name]
			if !ok {
				continue // not resolved: keep the spec's env as is
			}
			env := make([]corev1.EnvVar, 0, len(resolved))
			for ei, e := range resolved {
				if d, ok := declared[e.Name]; ok && d.ValueFrom != nil && (d.ValueFrom.FieldRef != nil || d.ValueFrom.ResourceFieldRef != nil) {
					env = append(env, d)
					continue
				}
				key := fmt.Sprintf("%s%d-%d", prefix, ci, ei)
				data[key] = []byte(e.Value)
				env = append(env, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}})
			}
			c.Env, c.EnvFrom = env, nil
		}
	}
	rewrite("i", tp.Spec.InitContainers)
	rewrite("c", tp.Spec.Containers)
	if len(data) == 0 {
		return nil
	}
	return &depCopy{kind: copySecret, name: name, secretType: corev1.SecretTypeOpaque, data: data}
}

// dockerConfig is the .dockerconfigjson of creds.
func dockerConfig(creds []provider.RegistryCredential) []byte {
	type entry struct {
		Username      string `json:"username,omitempty"`
		Password      string `json:"password,omitempty"`
		Auth          string `json:"auth,omitempty"`
		IdentityToken string `json:"identitytoken,omitempty"`
	}
	auths := map[string]entry{}
	for _, c := range creds {
		auths[c.Registry] = entry{c.Username, c.Password, c.Auth, c.IdentityToken}
	}
	b, _ := json.Marshal(map[string]any{"auths": auths})
	return b
}

// configMapData splits data into Data (valid UTF-8) and BinaryData.
func configMapData(data map[string][]byte) (map[string]string, map[string][]byte) {
	text, bin := map[string]string{}, map[string][]byte{}
	for k, v := range data {
		if utf8.Valid(v) {
			text[k] = string(v)
		} else {
			bin[k] = v
		}
	}
	return text, bin
}
