package resolve

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// Event reasons the resolver records on pods.
const (
	// ReasonFailedToRetrievePullSecret: the kubelet's reason for a missing pull secret.
	ReasonFailedToRetrievePullSecret = "FailedToRetrieveImagePullSecret"
)

// source is where a resolution reads what a pod references. configMap and secret
// return (nil, nil) for an object that does not exist.
type source interface {
	configMap(namespace, name string) (*corev1.ConfigMap, error)
	secret(namespace, name string) (*corev1.Secret, error)
	// services returns the Services of the namespace.
	services(namespace string) ([]*corev1.Service, error)
	node() (*corev1.Node, error)
	// token returns a service-account token for the pod, bound to it. The bytes
	// may be shared: they are read-only.
	token(pod *corev1.Pod, audience string, expirationSeconds *int64) ([]byte, error)
}

// note is an Event to record about the pod.
type note struct{ Type, Reason, Message string }

// parts selects what a resolution builds.
type parts struct {
	env, volumes, pull bool
	// tokens requests service-account tokens; without it, token files are left out.
	tokens bool
}

var everything = parts{env: true, volumes: true, pull: true, tokens: true}

// resolution is one resolution of one pod. It reads each referenced object once.
type resolution struct {
	pod    *corev1.Pod
	src    source
	tokens bool

	configMaps map[string]*corev1.ConfigMap // nil value: looked up, missing
	secrets    map[string]*corev1.Secret
	nodeObj    *corev1.Node
	notes      []note
}

// resolvePod resolves the parts of pod selected by what, reading from src. It
// returns the Events to record along with the result. The pod is not modified.
func resolvePod(pod *corev1.Pod, src source, what parts) (*provider.ResolvedPod, []note, error) {
	r := &resolution{pod: pod, src: src, tokens: what.tokens,
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	out := &provider.ResolvedPod{Pod: pod.DeepCopy()}
	if what.env {
		links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
		var svcs []*corev1.Service
		if links && pod.Namespace != "default" {
			s, err := src.services(pod.Namespace)
			if err != nil {
				return nil, nil, err
			}
			svcs = append(svcs, s...)
		}
		s, err := src.services("default")
		if err != nil {
			return nil, nil, err
		}
		svcs = append(svcs, s...)
		var services *envList
		if shared, ok := src.(serviceEnvSharer); ok {
			services = shared.serviceEnv(pod.Namespace, links, svcs)
		} else {
			services = serviceEnv(pod.Namespace, links, svcs)
		}

		out.Env = map[string][]corev1.EnvVar{}
		add := func(c *corev1.Container) error {
			env, err := r.containerEnv(c, services)
			if err != nil {
				return fmt.Errorf("container %s: %w", c.Name, err)
			}
			out.Env[c.Name] = env
			return nil
		}
		for i := range pod.Spec.InitContainers {
			if err := add(&pod.Spec.InitContainers[i]); err != nil {
				return nil, nil, err
			}
		}
		for i := range pod.Spec.Containers {
			if err := add(&pod.Spec.Containers[i]); err != nil {
				return nil, nil, err
			}
		}
		for i := range pod.Spec.EphemeralContainers {
			c := corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			if err := add(&c); err != nil {
				return nil, nil, err
			}
		}
		if key := envKey(pod, out.Env, services); key != "" {
			out.Env = services.sharedEnv(key, out.Env)
		}
	}
	if what.volumes {
		v, err := r.volumes()
		if err != nil {
			return nil, nil, err
		}
		out.Volumes = v
	}
	if what.pull {
		creds, err := r.pullCredentials()
		if err != nil {
			return nil, nil, err
		}
		out.PullCredentials = creds
	}
	return out, r.notes, nil
}

func (r *resolution) configMap(name string) (*corev1.ConfigMap, error) {
	if cm, ok := r.configMaps[name]; ok {
		return cm, nil
	}
	cm, err := r.src.configMap(r.pod.Namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", r.pod.Namespace, name, err)
	}
	r.configMaps[name] = cm
	return cm, nil
}

func (r *resolution) secret(name string) (*corev1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	s, err := r.src.secret(r.pod.Namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", r.pod.Namespace, name, err)
	}
	r.secrets[name] = s
	return s, nil
}

func (r *resolution) node() (*corev1.Node, error) {
	if r.nodeObj != nil {
		return r.nodeObj, nil
	}
	n, err := r.src.node()
	if err != nil {
		return nil, fmt.Errorf("reading the node: %w", err)
	}
	r.nodeObj = n
	return n, nil
}

func (r *resolution) note(typ, reason, msg string) {
	for _, n := range r.notes {
		if n.Message == msg {
			return
		}
	}
	r.notes = append(r.notes, note{typ, reason, msg})
}

// noteOptional records that an optional reference was skipped.
func (r *resolution) noteOptional(kind, name, key, container string) {
	what := fmt.Sprintf("%s %s/%s", kind, r.pod.Namespace, name)
	if key != "" {
		what = fmt.Sprintf("key %s of %s", key, what)
	}
	where := "a volume"
	if container != "" {
		where = "the environment of container " + container
	}
	// Upstream virtual-kubelet's reasons: OptionalConfigMapNotFound, …KeyNotFound.
	r.note(corev1.EventTypeNormal, notFoundReason("Optional", kind, key), fmt.Sprintf("Optional %s not found; skipped in %s", what, where))
}
