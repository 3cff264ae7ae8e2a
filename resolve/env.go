package resolve

import (
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// This file holds a container's environment as the kubelet builds it: envFrom, then
// env with its ConfigMap and Secret keys (the downward API is in downward.go), then
// the service variables (servicelinks.go).

// envList is an environment under construction: the kubelet keeps a map, we also keep
// the order in which names were first set, so that the result is deterministic.
type envList struct {
	names  []string
	values map[string]string
	// vars is the finished list as container variables, made once for the service
	// variables: a container that declares no variables of its own gets this very
	// slice (read-only, as ResolvedPod.Env is), so thousands of such pods in a
	// namespace hold one list rather than one each.
	vars []corev1.EnvVar

	// envs are whole ResolvedPod.Env maps handed out to every pod whose
	// environment is the same, keyed by envKey: pods of one template share one map
	// instead of holding one each.
	mu   sync.Mutex
	envs map[string]map[string][]corev1.EnvVar
}

// declaresEnv reports whether c has variables of its own, beyond the service
// variables every container gets.
func declaresEnv(c *corev1.Container) bool { return len(c.EnvFrom) > 0 || len(c.Env) > 0 }

func newEnvList() *envList { return &envList{values: map[string]string{}} }

func (e *envList) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *envList) get(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

// containerEnv builds the environment of container c as the kubelet's
// makeEnvironmentVariables does: envFrom first (later sources win), then env in
// order (a value's $(VAR) references see envFrom, the variables declared before it
// and the service variables), then the service variables not already set. The
// order is: names in the order first set, then the service variables in theirs.
func (r *resolution) containerEnv(c *corev1.Container, services *envList) ([]corev1.EnvVar, error) {
	if !declaresEnv(c) && services.vars != nil {
		return services.vars, nil
	}
	ns := r.pod.Namespace
	env := newEnvList()
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			ref := from.ConfigMapRef
			cm, err := r.configMap(ref.Name)
			if err != nil {
				return nil, err
			}
			if cm == nil {
				if isOptional(ref.Optional) {
					r.noteOptional("ConfigMap", ref.Name, "", c.Name)
					continue
				}
				return nil, &MissingError{Kind: "ConfigMap", Namespace: ns, Name: ref.Name}
			}
			for _, k := range sortedKeys(cm.Data) {
				env.set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			ref := from.SecretRef
			s, err := r.secret(ref.Name)
			if err != nil {
				return nil, err
			}
			if s == nil {
				if isOptional(ref.Optional) {
					r.noteOptional("Secret", ref.Name, "", c.Name)
					continue
				}
				return nil, &MissingError{Kind: "Secret", Namespace: ns, Name: ref.Name}
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}

	mapping := func(name string) (string, bool) {
		if v, ok := env.get(name); ok {
			return v, true
		}
		return services.get(name)
	}
	for _, ev := range c.Env {
		value := ev.Value
		if value != "" {
			value = expand(value, mapping)
		} else if from := ev.ValueFrom; from != nil {
			var err error
			var skip bool
			switch {
			case from.FieldRef != nil:
				value, err = r.fieldRef(from.FieldRef)
			case from.ResourceFieldRef != nil:
				value, err = r.resourceFieldRef(from.ResourceFieldRef, c)
			case from.ConfigMapKeyRef != nil:
				value, skip, err = r.configMapKey(from.ConfigMapKeyRef, c.Name)
			case from.SecretKeyRef != nil:
				value, skip, err = r.secretKey(from.SecretKeyRef, c.Name)
			}
			if err != nil {
				return nil, err
			}
			if skip {
				continue
			}
		}
		env.set(ev.Name, value)
	}

	out := make([]corev1.EnvVar, 0, len(env.names)+len(services.names))
	for _, n := range env.names {
		out = append(out, corev1.EnvVar{Name: n, Value: env.values[n]})
	}
	for _, n := range services.names {
		if _, ok := env.values[n]; !ok {
			out = append(out, corev1.EnvVar{Name: n, Value: services.values[n]})
		}
	}
	return out, nil
}

func (r *resolution) configMapKey(ref *corev1.ConfigMapKeySelector, container string) (string, bool, error) {
	cm, err := r.configMap(ref.Name)
	if err != nil {
		return "", false, err
	}
	optional := isOptional(ref.Optional)
	if cm == nil {
		if optional {
			r.noteOptional("ConfigMap", ref.Name, "", container)
			return "", true, nil
		}
		return "", false, &MissingError{Kind: "ConfigMap", Namespace: r.pod.Namespace, Name: ref.Name}
	}
	v, ok := cm.Data[ref.Key]
	if !ok {
		if optional {
			r.noteOptional("ConfigMap", ref.Name, ref.Key, container)
			return "", true, nil
		}
		return "", false, &MissingError{Kind: "ConfigMap", Namespace: r.pod.Namespace, Name: ref.Name, Key: ref.Key}
	}
	return v, false, nil
}

func (r *resolution) secretKey(ref *corev1.SecretKeySelector, container string) (string, bool, error) {
	s, err := r.secret(ref.Name)
	if err != nil {
		return "", false, err
	}
	optional := isOptional(ref.Optional)
	if s == nil {
		if optional {
			r.noteOptional("Secret", ref.Name, "", container)
			return "", true, nil
		}
		return "", false, &MissingError{Kind: "Secret", Namespace: r.pod.Namespace, Name: ref.Name}
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		if optional {
			r.noteOptional("Secret", ref.Name, ref.Key, container)
			return "", true, nil
		}
		return "", false, &MissingError{Kind: "Secret", Namespace: r.pod.Namespace, Name: ref.Name, Key: ref.Key}
	}
	return string(v), false, nil
}

func isOptional(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
