package resolve

import (
	"iter"
	"strings"
)

// podIndex holds the resolver's pods by namespace, then name. Its keys are the
// strings of the pods it was given (a node's decoded pods share their name with
// the pod cache's key, and their namespace with every other pod's), where a
// map by "namespace/name" kept a key of its own for each pod: 48 bytes a pod
// for the pod's whole life.
type podIndex map[string]map[string]*podRefs

// get returns the pod of key (namespace/name), or nil.
func (x podIndex) get(key string) *podRefs {
	ns, name, _ := strings.Cut(key, "/")
	return x.of(ns, name)
}

// of returns the pod namespace/name, or nil.
func (x podIndex) of(namespace, name string) *podRefs { return x[namespace][name] }

// put sets the pod namespace/name to p.
func (x podIndex) put(namespace, name string, p *podRefs) {
	byName := x[namespace]
	if byName == nil {
		byName = map[string]*podRefs{}
		x[namespace] = byName
	}
	byName[name] = p
}

// remove forgets the pod of key, and its namespace's map with its last pod
// (a map never shrinks: a namespace emptied would keep its deepest room).
func (x podIndex) remove(key string) {
	ns, name, _ := strings.Cut(key, "/")
	byName := x[ns]
	delete(byName, name)
	if len(byName) == 0 {
		delete(x, ns)
	}
}

// all yields each pod with its namespace and name.
func (x podIndex) all() iter.Seq2[podName, *podRefs] {
	return func(yield func(podName, *podRefs) bool) {
		for ns, byName := range x {
			for name, p := range byName {
				if !yield(podName{ns, name}, p) {
					return
				}
			}
		}
	}
}

// podName is a pod's namespace and name, for callers that make its key only
// when they need it.
type podName struct{ namespace, name string }

// key is namespace/name.
func (n podName) key() string { return n.namespace + "/" + n.name }
