package resolve

import (
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// This file holds the service-link variables every container gets
// ({SVC}_SERVICE_HOST, the Docker-link {SVC}_PORT_* ones), and their memo shared by
// the pods of a namespace.

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

// serviceEnvSharer is implemented by sources that share service variables
// between resolutions (the Resolver's caches do; see serviceEnvMemo).
type serviceEnvSharer interface {
	serviceEnv(podNamespace string, links bool, services []*corev1.Service) *envList
}

// serviceEnvMemo shares the service variables between the pods of a namespace:
// they are the same for every pod there until a Service changes, and a node with
// thousands of pods would otherwise keep thousands of copies of their strings
// (vkubeletctl bench). The lists it returns are read, never changed.
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
