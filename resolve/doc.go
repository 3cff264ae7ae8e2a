// Package resolve turns a pod into what a provider needs to run it without API access
// of its own (a provider.ResolvedPod): the environment of every container, built the
// way the kubelet builds it, the files of its configMap, secret, downwardAPI and
// projected volumes (service-account tokens from the TokenRequest API included), and
// the registry credentials of its image pull secrets.
//
// A Resolver watches only what the pods of its node need: ConfigMaps, Secrets and
// Services of the namespaces that have pods on the node (and the Services of
// `default`, for KUBERNETES_SERVICE_HOST), released when the last pod of a
// namespace goes. It tells its caller when an object a pod references changes or a
// token it handed out nears expiry, so mounted volumes can be refreshed.
//
// A missing mandatory reference is a *MissingError, worded like the kubelet's.
//
// The pod controller (package pod) is its only caller; it knows the provider
// contract and nothing of the controllers.
package resolve
