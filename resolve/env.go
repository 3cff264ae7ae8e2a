package resolve

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

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

// fieldRef resolves a downward-API field of the pod, as the kubelet's
// podFieldSelectorRuntimeValue and fieldpath.ExtractFieldPathAsString do.
func (r *resolution) fieldRef(fs *corev1.ObjectFieldSelector) (string, error) {
	p := r.pod
	path := fs.FieldPath
	if path == "spec.host" { // the kubelet's conversion of the old name
		path = "spec.nodeName"
	}
	switch path {
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		ips, err := r.hostIPs()
		if err != nil {
			return "", err
		}
		if path == "status.hostIP" {
			return ips[0], nil
		}
		return strings.Join(ips, ","), nil
	case "status.podIP":
		ips, err := r.podIPs()
		if err != nil || len(ips) == 0 {
			return "", err
		}
		return ips[0], nil
	case "status.podIPs":
		ips, err := r.podIPs()
		return strings.Join(ips, ","), err
	}
	return metadataField(p, path)
}

// metadataField is the kubelet's fieldpath.ExtractFieldPathAsString for the
// metadata fields the downward API allows.
func metadataField(p *corev1.Pod, path string) (string, error) {
	if sub, key, ok := splitMapKey(path); ok {
		switch sub {
		case "metadata.labels":
			return p.Labels[key], nil
		case "metadata.annotations":
			return p.Annotations[key], nil
		}
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	}
	return "", fmt.Errorf("pod %s/%s: unsupported fieldPath %q", p.Namespace, p.Name, path)
}

// splitMapKey splits "metadata.labels['key']" into "metadata.labels" and "key".
func splitMapKey(path string) (string, string, bool) {
	i := strings.Index(path, "['")
	if i < 0 || !strings.HasSuffix(path, "']") {
		return "", "", false
	}
	return path[:i], path[i+2 : len(path)-2], true
}

// formatMap renders labels or annotations as the downward API does: key="value"
// lines (Go-quoted values), sorted by key, without a final newline.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// hostIPs are the node's addresses as the kubelet's GetNodeHostIPs picks them:
// InternalIPs before ExternalIPs; the first, then the first of the other family.
func (r *resolution) hostIPs() ([]string, error) {
	node, err := r.node()
	if err != nil {
		return nil, err
	}
	var all []net.IP
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == t {
				if ip := net.ParseIP(a.Address); ip != nil {
					all = append(all, ip)
				}
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("host IP unknown; known addresses of node %s: %v", node.Name, node.Status.Addresses)
	}
	out := []string{all[0].String()}
	first6 := all[0].To4() == nil
	for _, ip := range all[1:] {
		if (ip.To4() == nil) != first6 {
			out = append(out, ip.String())
			break
		}
	}
	return out, nil
}

// podIPs are the pod's addresses. The kubelet knows them from the sandbox it has just
// created; here they are known once the provider has reported them (so on the first
// CreatePod only for hostNetwork pods, which have the node's).
func (r *resolution) podIPs() ([]string, error) {
	var out []string
	for _, ip := range r.pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && r.pod.Status.PodIP != "" {
		out = []string{r.pod.Status.PodIP}
	}
	if len(out) == 0 && r.pod.Spec.HostNetwork {
		return r.hostIPs()
	}
	return out, nil
}

// resourceFieldRef resolves a container's resource for the downward API. Unset
// limits of cpu, memory and ephemeral-storage default to the node's allocatable, as
// the kubelet's defaultPodLimitsForDownwardAPI does.
func (r *resolution) resourceFieldRef(fs *corev1.ResourceFieldSelector, self *corev1.Container) (string, error) {
	c := self
	if fs.ContainerName != "" {
		c = findContainer(r.pod, fs.ContainerName)
		if c == nil {
			return "", fmt.Errorf("pod %s/%s: container %q of resourceFieldRef not found", r.pod.Namespace, r.pod.Name, fs.ContainerName)
		}
	}
	limits, err := r.defaultedLimits(c)
	if err != nil {
		return "", err
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	list, name, ok := strings.Cut(fs.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
	}
	var q resource.Quantity
	switch list {
	case "limits":
		q = limits[corev1.ResourceName(name)]
	case "requests":
		q = c.Resources.Requests[corev1.ResourceName(name)]
	default:
		return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
	}
	switch corev1.ResourceName(name) {
	case corev1.ResourceCPU:
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	if strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported container resource: %v", fs.Resource)
}

// defaultedLimits are c's limits with unset (or zero) cpu, memory and
// ephemeral-storage limits taken from the node's allocatable.
func (r *resolution) defaultedLimits(c *corev1.Container) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		out[k] = v
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := out[name]; ok && !q.IsZero() {
			continue
		}
		node, err := r.node()
		if err != nil {
			return nil, err
		}
		if a, ok := node.Status.Allocatable[name]; ok {
			out[name] = a.DeepCopy()
		}
	}
	return out, nil
}

func findContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// serviceEnv builds the service-link variables of the pod as the kubelet's
// getServiceEnvVarMap and envvars.FromServices do: `kubernetes` from `default`
// always, and every service of the pod's namespace (one of them named `kubernetes`
// wins over default's) when enableServiceLinks is on. Services without a cluster IP
// are skipped. Services are taken in name order.
func serviceEnv(podNamespace string, enableLinks bool, services []*corev1.Service) *envList {
	byName := map[string]*corev1.Service{}
	for _, s := range services {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		switch {
		case s.Namespace == podNamespace && enableLinks:
			byName[s.Name] = s
		case s.Namespace == "default" && s.Name == "kubernetes":
			if _, ok := byName[s.Name]; !ok {
				byName[s.Name] = s
			}
		}
	}
	env := newEnvList()
	for _, name := range sortedKeys(byName) {
		s := byName[name]
		prefix := envName(s.Name)
		ip := s.Spec.ClusterIP
		env.set(prefix+"_SERVICE_HOST", ip)
		env.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
		for _, sp := range s.Spec.Ports {
			if sp.Name != "" {
				env.set(prefix+"_SERVICE_PORT_"+envName(sp.Name), strconv.Itoa(int(sp.Port)))
			}
		}
		// Docker-link variables.
		for i, sp := range s.Spec.Ports {
			proto := string(corev1.ProtocolTCP)
			if sp.Protocol != "" {
				proto = string(sp.Protocol)
			}
			url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, strconv.Itoa(int(sp.Port)))
			if i == 0 {
				env.set(prefix+"_PORT", url)
			}
			pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, sp.Port, strings.ToUpper(proto))
			env.set(pp, url)
			env.set(pp+"_PROTO", strings.ToLower(proto))
			env.set(pp+"_PORT", strconv.Itoa(int(sp.Port)))
			env.set(pp+"_ADDR", ip)
		}
	}
	env.vars = make([]corev1.EnvVar, 0, len(env.names))
	for _, n := range env.names {
		env.vars = append(env.vars, corev1.EnvVar{Name: n, Value: env.values[n]})
	}
	return env
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

func isOptional(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// serviceEnvSharer is implemented by sources that share service variables
// between resolutions (the Resolver's caches do; see serviceEnvMemo).
type serviceEnvSharer interface {
	serviceEnv(podNamespace string, links bool, services []*corev1.Service) *envList
}

// serviceEnvMemo shares the service variables between the pods of a namespace:
// they are the same for every pod there until a Service changes, and a node with
// thousands of pods would otherwise keep thousands of copies of their strings
// (vkubelet bench). The lists it returns are read, never changed.
type serviceEnvMemo struct {
	mu sync.Mutex
	m  map[string]*memoEntry
}

// memoEntry is a list and the Service objects it was built from. Holding them
// keeps their identity: the informer replaces a Service object on every change,
// so the same objects mean the same Services even where a resourceVersion does
// not change (client-go's fakes never set one).
type memoEntry struct {
	services []*corev1.Service
	env      *envList
}

// maxServiceEnvs bounds the memo; when full it starts afresh, which drops the
// lists of Services that have changed since.
const maxServiceEnvs = 256

func (m *serviceEnvMemo) get(podNamespace string, links bool, services []*corev1.Service) *envList {
	sorted := slices.Clone(services)
	id := func(s *corev1.Service) string {
		return s.Namespace + "/" + s.Name + "/" + string(s.UID) + "/" + s.ResourceVersion
	}
	slices.SortFunc(sorted, func(a, b *corev1.Service) int { return strings.Compare(id(a), id(b)) })
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%t", podNamespace, links)
	for _, s := range sorted {
		fmt.Fprintf(h, "|%s", id(s))
	}
	key := strconv.FormatUint(h.Sum64(), 16)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m[key]; ok && slices.Equal(e.services, sorted) {
		return e.env
	}
	e := &memoEntry{services: sorted, env: serviceEnv(podNamespace, links, services)}
	if m.m == nil || len(m.m) >= maxServiceEnvs {
		m.m = map[string]*memoEntry{}
	}
	m.m[key] = e
	return e.env
}
