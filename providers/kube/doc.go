// Package kube is the "kube" provider: a virtual node that stands for a whole other
// Kubernetes cluster (the target), so pods bound to the node in the source cluster
// run in the target through its API server (multi-cluster bursting). It knows the
// provider contract and client-go, never the controllers.
//
// # Mapping
//
// A source pod ns/name becomes a target pod of the same name in the target
// namespace given by Config.NamespaceStrategy: "suffix" (the default) maps ns to
// "<ns>-<clusterID>", "same" keeps ns (only sound when one source cluster uses the
// target namespaces). Names longer than the API allows are cut and end with a hash
// of the full name, so the mapping stays stable and injective. Missing target
// namespaces are created (and left in place). Keeping the name also keeps "at most
// one copy": a StatefulSet's new db-0 cannot be created in the target while the old
// one is still there, terminating.
//
// Every object the provider creates carries the label vkubelet.io/offloaded-by
// (cluster id and node name, hashed if long) and vkubelet.io/origin-uid; its
// annotations record the source cluster, namespace, name and UID. The provider
// reads (informer label selector) and writes only objects carrying its label; a
// target pod of the same name without them is reported as a conflict, not touched.
//
// In the target pod spec nodeName, ownerReferences, status, readiness and scheduling
// gates, priority class, ephemeral containers and the service account are dropped;
// automountServiceAccountToken is false and the kube-api-access-* token volumes and
// their mounts are removed. nodeSelector, affinity and tolerations are kept unless
// Config.Strip* says otherwise; nodeSelector terms that pin the pod to the virtual
// node itself (kubernetes.io/hostname=<node>, type=virtual-kubelet) are dropped, and
// so are node affinity requirements that select it by name (kubernetes.io/hostname
// or metadata.name In a list naming it, as DaemonSets and the e2e framework pin
// pods): the virtual node stands for every target node.
//
// # Dependencies
//
// The provider is a ResolvedPodHandler: it gets the pod with its environment and
// volume files resolved in the source. It does not copy source ConfigMaps and
// Secrets by name; it creates, per (pod, volume), one Secret (secret and projected
// volumes) or ConfigMap (configMap volumes) named "<pod>-<volume>-<hash>" holding the
// resolved files, and rewrites the volume to reference it with items keeping each
// file's path and mode. The resolved environment goes into one Secret
// "<pod>-env-<hash>" referenced by secretKeyRef (so no secret value is written in the
// pod spec); fieldRef and resourceFieldRef variables are kept as declared, so the
// target resolves them. Pull credentials become a kubernetes.io/dockerconfigjson
// Secret. Copies are created before the pod and then owned by it (ownerReference),
// so the target's garbage collector removes them with the pod; UpdatePodVolumes
// rewrites them when a source ConfigMap or Secret changes.
//
// # Status
//
// An informer on the target's pods (label selector) serves GetPod, GetPodStatus and
// GetPods and drives PodNotifier. Phase, reason, message, conditions, start time,
// container statuses and pod IPs are those of the target pod (pod IPs are the
// target's, reachable only if the networks are connected); hostIP is the virtual
// node's InternalIP when known, the target node's otherwise. A target pod deleted
// behind the provider's back is created again from the last spec it was given
// unless the pod's restartPolicy is Never, in which case it is reported Failed with
// reason TargetPodDeleted.
//
// # Node
//
// Capacity and allocatable are the sum of the allocatable resources (extended ones
// included) of the target's Ready, schedulable nodes selected by Config.CountNodes
// (default: not virtual, type!=virtual-kubelet), minus the requests of the non-terminal pods on them that
// this provider did not create, capped by Config.Capacity; they follow node and pod
// informers. Ping asks the target's /readyz: while it fails the source node goes
// NotReady and nothing is deleted; the informers re-list when the target returns.
//
// Logs, exec, attach and port-forward go to the target pod through the target's API
// server (pods/log, pods/exec, pods/attach, pods/portforward; exec and attach over
// WebSocket with a SPDY fallback). /stats/summary gathers the pod stats of the target
// nodes that run our pods (nodes/<n>/proxy/stats/summary) under the source pods'
// names, with node CPU and memory the sum over those pods.
//
// Not done: the pod's ServiceAccount is not copied (the target pod runs as its
// namespace's default one, without a token); copied namespaces are never removed.
package kube
