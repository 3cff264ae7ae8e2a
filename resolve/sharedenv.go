package resolve

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// This file holds the sharing of whole resolved environments: pods of one template
// get one ResolvedPod.Env map rather than one each, unless a Secret or something
// only the pod has is in it.

// maxSharedEnvs bounds envList.envs; environments beyond it are not shared.
const maxSharedEnvs = 64

// sharedEnv returns the map kept for environments equal to env, keeping env itself
// as that map if there is none yet. key is envKey's for env.
func (e *envList) sharedEnv(key string, env map[string][]corev1.EnvVar) map[string][]corev1.EnvVar {
	e.mu.Lock()
	defer e.mu.Unlock()
	if kept, ok := e.envs[key]; ok {
		return kept
	}
	if e.envs == nil {
		e.envs = map[string]map[string][]corev1.EnvVar{}
	}
	if len(e.envs) < maxSharedEnvs {
		e.envs[key] = env
	}
	return env
}

// envKey identifies the resolved environment env of pod among the pods of one
// namespace (and one version of its Services), or returns "" if env is not to be
// shared. Pods whose containers declare no variables of their own are keyed by
// their container names alone. Others are keyed by a digest of every name and
// value, unless a variable comes from a Secret (a shared map would keep its value
// after the pod is gone) or from the pod's own name, UID or IP, which no other pod
// has: such pods would only fill the table.
func envKey(pod *corev1.Pod, env map[string][]corev1.EnvVar, services *envList) string {
	names := make([]string, 0, len(env))
	own := false
	for n, vars := range env {
		names = append(names, n)
		own = own || services.vars == nil || !sameSlice(vars, services.vars)
	}
	slices.Sort(names)
	if !own {
		return strings.Join(names, "\x00")
	}
	if !shareableEnv(pod) {
		return ""
	}
	h := sha256.New()
	for _, n := range names {
		writeString(h, n)
		for _, v := range env[n] {
			writeString(h, v.Name)
			writeString(h, v.Value)
		}
		writeString(h, "") // end of the container's list
	}
	return "\x01" + string(h.Sum(nil))
}

// sameSlice reports whether a and b are the same slice (not only equal ones).
func sameSlice(a, b []corev1.EnvVar) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func writeString(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// shareableEnv reports whether pod's environment may be shared with other pods:
// no Secret in it and nothing only this pod has.
func shareableEnv(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, from := range cs[i].EnvFrom {
				if from.SecretRef != nil {
					return false
				}
			}
			for _, v := range cs[i].Env {
				if v.ValueFrom == nil {
					continue
				}
				if v.ValueFrom.SecretKeyRef != nil {
					return false
				}
				if f := v.ValueFrom.FieldRef; f != nil {
					switch f.FieldPath {
					case "metadata.name", "metadata.uid", "status.podIP", "status.podIPs":
						return false
					}
				}
			}
		}
	}
	return len(pod.Spec.EphemeralContainers) == 0
}
