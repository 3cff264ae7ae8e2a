package resolve

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// defaultFileMode is the API's default for defaultMode (0644).
const defaultFileMode int32 = 0o644

// volumes builds the files of every configMap, secret, downwardAPI and projected
// volume of the pod, as the kubelet's volume plugins would write them.
func (r *resolution) volumes() (map[string]*provider.VolumeContents, error) {
	var out map[string]*provider.VolumeContents // nil for the many pods without such volumes
	for i := range r.pod.Spec.Volumes {
		v := &r.pod.Spec.Volumes[i]
		files := map[string]provider.VolumeFile{}
		var err error
		switch {
		case v.ConfigMap != nil:
			err = r.configMapFiles(files, v.Name, v.ConfigMap.Name, v.ConfigMap.Items, modeOr(v.ConfigMap.DefaultMode), isOptional(v.ConfigMap.Optional))
		case v.Secret != nil:
			err = r.secretFiles(files, v.Name, v.Secret.SecretName, v.Secret.Items, modeOr(v.Secret.DefaultMode), isOptional(v.Secret.Optional))
		case v.DownwardAPI != nil:
			err = r.downwardAPIFiles(files, v.DownwardAPI.Items, modeOr(v.DownwardAPI.DefaultMode))
		case v.Projected != nil:
			err = r.projectedFiles(files, v.Name, v.Projected)
		default:
			continue // emptyDir, hostPath, …: the provider reads Pod.Spec.Volumes
		}
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]*provider.VolumeContents{}
		}
		out[v.Name] = sortedFiles(files)
	}
	return out, nil
}

func modeOr(m *int32) int32 {
	if m != nil {
		return *m
	}
	return defaultFileMode
}

func itemMode(item *int32, def int32) int32 {
	if item != nil {
		return *item
	}
	return def
}

// configMapFiles is the kubelet's configmap.MakePayload: every key (Data and
// BinaryData) without items, else the items, a missing key being an error unless
// the volume is optional.
func (r *resolution) configMapFiles(files map[string]provider.VolumeFile, volume, name string, items []corev1.KeyToPath, mode int32, optional bool) error {
	cm, err := r.configMap(name)
	if err != nil {
		return err
	}
	if cm == nil {
		if optional {
			r.noteOptional("ConfigMap", name, "", "")
			return nil
		}
		return &MissingError{Kind: "ConfigMap", Namespace: r.pod.Namespace, Name: name, Volume: volume}
	}
	if len(items) == 0 {
		// Bytes are shared, never copied per pod: volume files are read-only
		// (provider contract) and cached objects are never changed in place.
		for k, v := range cm.Data {
			files[k] = provider.VolumeFile{Path: k, Data: configMapBytes(r.src, cm, k, v), Mode: mode}
		}
		for k, v := range cm.BinaryData {
			files[k] = provider.VolumeFile{Path: k, Data: v, Mode: mode}
		}
		return nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = configMapBytes(r.src, cm, it.Key, s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else {
			if optional {
				continue
			}
			return &MissingError{Kind: "ConfigMap", Namespace: r.pod.Namespace, Name: name, Key: it.Key, Volume: volume}
		}
		files[it.Path] = provider.VolumeFile{Path: it.Path, Data: data, Mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// secretFiles is the kubelet's secret.MakePayload.
func (r *resolution) secretFiles(files map[string]provider.VolumeFile, volume, name string, items []corev1.KeyToPath, mode int32, optional bool) error {
	s, err := r.secret(name)
	if err != nil {
		return err
	}
	if s == nil {
		if optional {
			r.noteOptional("Secret", name, "", "")
			return nil
		}
		return &MissingError{Kind: "Secret", Namespace: r.pod.Namespace, Name: name, Volume: volume}
	}
	if len(items) == 0 {
		for k, v := range s.Data {
			files[k] = provider.VolumeFile{Path: k, Data: v, Mode: mode} // shared, as above
		}
		return nil
	}
	for _, it := range items {
		v, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return &MissingError{Kind: "Secret", Namespace: r.pod.Namespace, Name: name, Key: it.Key, Volume: volume}
		}
		files[it.Path] = provider.VolumeFile{Path: it.Path, Data: v, Mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// downwardAPIFiles is the kubelet's downwardapi.CollectData.
func (r *resolution) downwardAPIFiles(files map[string]provider.VolumeFile, items []corev1.DownwardAPIVolumeFile, mode int32) error {
	for _, it := range items {
		var value string
		var err error
		switch {
		case it.FieldRef != nil:
			value, err = metadataField(r.pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := findContainer(r.pod, it.ResourceFieldRef.ContainerName)
			if c == nil {
				return fmt.Errorf("pod %s/%s: downwardAPI file %s: container %q not found", r.pod.Namespace, r.pod.Name, it.Path, it.ResourceFieldRef.ContainerName)
			}
			value, err = r.resourceFieldRef(it.ResourceFieldRef, c)
		}
		if err != nil {
			return err
		}
		files[it.Path] = provider.VolumeFile{Path: it.Path, Data: []byte(value), Mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// projectedFiles is the kubelet's projected volume: every source into one
// directory, tokens requested with the TokenRequest API bound to the pod.
func (r *resolution) projectedFiles(files map[string]provider.VolumeFile, volume string, pv *corev1.ProjectedVolumeSource) error {
	mode := modeOr(pv.DefaultMode)
	for _, src := range pv.Sources {
		var err error
		switch {
		case src.ConfigMap != nil:
			err = r.configMapFiles(files, volume, src.ConfigMap.Name, src.ConfigMap.Items, mode, isOptional(src.ConfigMap.Optional))
		case src.Secret != nil:
			err = r.secretFiles(files, volume, src.Secret.Name, src.Secret.Items, mode, isOptional(src.Secret.Optional))
		case src.DownwardAPI != nil:
			err = r.downwardAPIFiles(files, src.DownwardAPI.Items, mode)
		case src.ServiceAccountToken != nil:
			if !r.tokens {
				continue
			}
			tp := src.ServiceAccountToken
			var tok []byte
			tok, err = r.src.token(r.pod, tp.Audience, tp.ExpirationSeconds)
			if err == nil {
				files[tp.Path] = provider.VolumeFile{Path: tp.Path, Data: tok, Mode: mode}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func sortedFiles(files map[string]provider.VolumeFile) *provider.VolumeContents {
	out := &provider.VolumeContents{Files: make([]provider.VolumeFile, 0, len(files))}
	for _, f := range files {
		out.Files = append(out.Files, f)
	}
	sort.Slice(out.Files, func(i, j int) bool { return out.Files[i].Path < out.Files[j].Path })
	return out
}
