package providerutil

import "github.com/vkubelet/vkubelet/errdefs"

// PodKey is "namespace/name": how a provider keys the pods it holds and names one
// in its errors and logs.
func PodKey(namespace, name string) string { return namespace + "/" + name }

// PodNotFound is the answer of the contract (errdefs.ErrNotFound) for a pod the
// provider does not hold: "<who>: pod namespace/name not found", who naming the
// provider ("mock", "cri", …).
func PodNotFound(who, namespace, name string) error {
	return errdefs.NotFound("%s: pod %s not found", who, PodKey(namespace, name))
}
