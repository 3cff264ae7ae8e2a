package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// PodShape is the kind of pod the benchmark creates; it is a pflag.Value.
type PodShape string

const (
	// ShapeDeployment is a pod as a Deployment made by `kubectl create deployment`
	// has it: the namespace's `default` ServiceAccount with its projected
	// `kube-api-access-*` token volume (added by the ServiceAccount admission
	// plugin), an owner reference to its ReplicaSet, the labels `app` and
	// `pod-template-hash`, resource requests and a few environment variables.
	// A node must request a bound token for each.
	ShapeDeployment PodShape = "deployment"
	// ShapeMinimal is one container without a token
	// (automountServiceAccountToken: false), labels or requests: the pods the
	// benchmark made before issue #20, for comparison with figures of that time.
	ShapeMinimal PodShape = "minimal"
)

// PodShapes are the valid shapes, the default first.
var PodShapes = []PodShape{ShapeDeployment, ShapeMinimal}

func (s *PodShape) String() string { return string(*s) }

// Set parses a shape name.
func (s *PodShape) Set(v string) error {
	for _, known := range PodShapes {
		if PodShape(v) == known {
			*s = known
			return nil
		}
	}
	return fmt.Errorf("unknown pod shape %q (want %s)", v, joinShapes("|"))
}

// Type names the flag's value in help text.
func (s *PodShape) Type() string { return joinShapes("|") }

func joinShapes(sep string) string {
	names := make([]string, len(PodShapes))
	for i, s := range PodShapes {
		names[i] = string(s)
	}
	return strings.Join(names, sep)
}

// The deployment shape's names: its Deployment, the hash of its pod template and
// so its ReplicaSet, as the Deployment controller would name them.
const (
	appName      = "bench"
	templateHash = "7d9c8b5f64"
)

// podTemplate makes the pods of one namespace in one shape.
type podTemplate struct {
	shape PodShape
	// owner is the namespace's ReplicaSet (deployment shape only).
	owner *metav1.OwnerReference
	// checked is set once a created pod has been seen to carry what its shape
	// promises (the token volume, the owner), so the check runs once.
	checked atomic.Bool
	// image and command, if set, replace the shape's: for a provider that runs
	// the containers (vkubeletctl bench --provider slurm).
	image   string
	command []string
}

// name is the name of the pod numbered i: for the deployment shape, that of a
// ReplicaSet's pod (`<replicaset>-<5 characters>`).
func (t *podTemplate) name(i int) string {
	if t.shape != ShapeDeployment {
		return "p-" + strconv.Itoa(i)
	}
	suffix := strconv.FormatInt(int64(i), 36)
	if len(suffix) < 5 {
		suffix = strings.Repeat("0", 5-len(suffix)) + suffix
	}
	return appName + "-" + templateHash + "-" + suffix
}

func deploymentLabels() map[string]string {
	return map[string]string{"app": appName, "pod-template-hash": templateHash}
}

// spec is the pod spec of the shape, before admission, unbound.
func (t *podTemplate) spec() corev1.PodSpec {
	spec := t.shapeSpec()
	if t.image != "" {
		spec.Containers[0].Image, spec.Containers[0].Command = t.image, t.command
	}
	return spec
}

func (t *podTemplate) shapeSpec() corev1.PodSpec {
	if t.shape != ShapeDeployment {
		return corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
			AutomountServiceAccountToken:  ptr.To(false),
		}
	}
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Containers: []corev1.Container{{
			Name:  "nginx",
			Image: "nginx:1.27",
			Env: []corev1.EnvVar{
				{Name: "LOG_LEVEL", Value: "info"},
				{Name: "LISTEN_PORT", Value: "8080"},
				{Name: "FEATURE_FLAGS", Value: "metrics,tracing"},
			},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("16Mi"),
			}},
		}},
	}
}

// pod is the pod called name, bound to node.
func (t *podTemplate) pod(name, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: t.spec()}
	p.Spec.NodeName = node
	if t.shape == ShapeDeployment {
		p.Labels = deploymentLabels()
		if t.owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*t.owner}
		}
	} else {
		p.Labels = map[string]string{"app": appName}
	}
	return p
}

// check returns an error if p, as the API server stored it, lacks what the shape
// promises: figures for pods without their token would be mislabelled. Only
// the first pod is checked.
func (t *podTemplate) check(p *corev1.Pod) error {
	if t.shape != ShapeDeployment || t.checked.Load() {
		return nil
	}
	if len(tokenSources(p)) == 0 {
		return fmt.Errorf("pod %s/%s has no service-account token volume: the API server's ServiceAccount admission plugin is off (use a cluster with it on, or --pod-shape=%s)",
			p.Namespace, p.Name, ShapeMinimal)
	}
	if len(p.OwnerReferences) == 0 {
		return fmt.Errorf("pod %s/%s has no owner reference", p.Namespace, p.Name)
	}
	t.checked.Store(true)
	return nil
}

// tokenSources returns the service-account token projections of p's volumes:
// what a node requests a token for when it starts p.
func tokenSources(p *corev1.Pod) []*corev1.ServiceAccountTokenProjection {
	var out []*corev1.ServiceAccountTokenProjection
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				out = append(out, src.ServiceAccountToken)
			}
		}
	}
	return out
}

// prepareNamespace creates namespace ns with what its pods need, and returns the
// template of its pods. The ServiceAccount admission plugin refuses pods whose
// ServiceAccount does not exist, and the token volume it adds projects the
// `kube-root-ca.crt` ConfigMap; both are the controller-manager's work, which the
// benchmark's own control plane does not run, so they are created here (an
// existing one is left as it is). The deployment shape's owner is a real
// ReplicaSet of 0 replicas, so the owner reference is valid: the garbage collector
// removes dependents only of owners that do not exist. A ReplicaSet controller, if
// one runs, would delete the pods of a ReplicaSet of 0 replicas; startPods reports
// that.
func prepareNamespace(ctx context.Context, c kubernetes.Interface, ns string, shape PodShape, caPEM []byte) (*podTemplate, error) {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/default: %w", ns, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(caPEM)}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ConfigMap %s/kube-root-ca.crt: %w", ns, err)
	}
	t := &podTemplate{shape: shape}
	if shape != ShapeDeployment {
		return t, nil
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: appName + "-" + templateHash, Labels: deploymentLabels()},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: deploymentLabels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: deploymentLabels()},
				Spec:       t.spec(),
			},
		},
	}
	rs, err := c.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating ReplicaSet %s/%s: %w", ns, appName+"-"+templateHash, err)
	}
	t.owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	return t, nil
}

// Comparison names another node implementation measured in the same run, next to
// the agent; it is a pflag.Value. Empty: none.
type Comparison string

// CompareKwok measures kwok (sigs.k8s.io/kwok) on a second node of the cluster.
const CompareKwok Comparison = "kwok"

func (c *Comparison) String() string { return string(*c) }

// Set parses a comparison name; "none" and "" clear it.
func (c *Comparison) Set(v string) error {
	switch Comparison(v) {
	case "", "none":
		*c = ""
	case CompareKwok:
		*c = CompareKwok
	default:
		return fmt.Errorf("unknown comparison %q (want %s or none)", v, CompareKwok)
	}
	return nil
}

// Type names the flag's value in help text.
func (c *Comparison) Type() string { return string(CompareKwok) }
