package provider

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// ResolvedPod is a pod together with everything the kubelet would look up in the API
// before starting it, so that a provider can run it without API access of its own.
// The pod controller builds it (package resolve) before every CreatePod/UpdatePod of
// a provider that implements ResolvedPodHandler.
//
// Pod is the provider's, like a pod passed to CreatePod. Env, Volumes and
// PullCredentials are shared with the controller, which keeps them to compare
// with later resolutions, and parts of them with other pods (the environment of a
// container that declares none is the namespace's service variables, one slice for
// all such containers; a file's Data is shared with every pod that mounts the same
// ConfigMap or Secret value, and with the controller's token cache): a provider
// may keep them but must not change them.
type ResolvedPod struct {
	Pod *corev1.Pod

	// Env is the environment of each container (init, app and ephemeral), by
	// container name, exactly as the kubelet would give it to the process: env and
	// envFrom resolved (configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef),
	// $(VAR) references expanded, service-link variables added. Every entry has a
	// Value and no ValueFrom. Order is deterministic: variables in the order they
	// were first set (envFrom keys sorted within each source, then env as
	// declared), then service variables by service name; a name set twice keeps the
	// later value, as in the kubelet.
	Env map[string][]corev1.EnvVar

	// Volumes holds the files of every configMap, secret, downwardAPI and projected
	// volume (service-account tokens and kube-root-ca.crt included), by volume name.
	// Other volume types (emptyDir, hostPath, …) are absent: the provider reads them
	// from Pod.Spec.Volumes.
	Volumes map[string]*VolumeContents

	// PullCredentials are the registry credentials of the pod's imagePullSecrets.
	PullCredentials []RegistryCredential
}

// VolumeContents are the files of one volume.
type VolumeContents struct {
	Files []VolumeFile
}

// VolumeFile is one file of a volume.
type VolumeFile struct {
	// Path is relative to the volume's root (may contain directories, never "..").
	Path string
	Data []byte
	// Mode is the file mode the kubelet would set (defaultMode, items[].mode).
	Mode int32
}

// RegistryCredential is one registry login from an image pull secret
// (kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg).
type RegistryCredential struct {
	// Registry is the key of the docker config entry (host, host/path or URL).
	Registry      string
	Username      string
	Password      string
	Auth          string // base64 "user:password", as in the docker config
	IdentityToken string
}

// ResolvedPodHandler is implemented by providers that want pods resolved. For such a
// provider the pod controller calls CreateResolvedPod and UpdateResolvedPod instead
// of CreatePod and UpdatePod; the rules of those methods apply unchanged.
type ResolvedPodHandler interface {
	CreateResolvedPod(ctx context.Context, pod *ResolvedPod) error
	UpdateResolvedPod(ctx context.Context, pod *ResolvedPod) error
}

// VolumeUpdater is implemented by providers that keep mounted volumes current, as the
// kubelet does: it is called with the new contents when a ConfigMap or Secret that a
// volume of the pod references changes, or a projected service-account token is
// refreshed before it expires. Only Volumes changes; environment variables stay as
// the container started with them.
type VolumeUpdater interface {
	UpdatePodVolumes(ctx context.Context, pod *ResolvedPod) error
}
