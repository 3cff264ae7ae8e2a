package wirefixtures

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The objects of a recording, the same in every release's.
const (
	namespace      = "wire"
	podName        = "web-6b7f9d8c4-q2x7z"
	nodeName       = "vk-node-0"
	replicaSet     = "web-6b7f9d8c4"
	configMapName  = "web-config"
	secretName     = "web-secret"
	readinessGate  = "example.com/load-balancer-ready"
	sidecarName    = "log-shipper"
	ephemeralName  = "debugger-x7k2p"
	serviceAccount = "default"
)

// optional is a part of the rich pod that a release may refuse or drop (a
// field behind a feature gate it has not turned on): the pod is recorded
// without it then, and the manifest says so.
type optional struct {
	name string
	// in is what the API server's validation error names when it refuses it.
	in   string
	drop func(*corev1.Pod)
	// kept reports whether the pod the API server stored has it.
	kept func(*corev1.Pod) bool
}

var optionals = []optional{
	{name: "sidecar init container (restartPolicy Always)", in: "restartPolicy",
		drop: func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.InitContainers[:1] },
		kept: func(p *corev1.Pod) bool {
			return len(p.Spec.InitContainers) > 1 && p.Spec.InitContainers[1].RestartPolicy != nil
		}},
	{name: "pod-level resources", in: "spec.resources",
		drop: func(p *corev1.Pod) { p.Spec.Resources = nil },
		kept: func(p *corev1.Pod) bool { return p.Spec.Resources != nil }},
	{name: "container resize policy", in: "resizePolicy",
		drop: func(p *corev1.Pod) {
			for i := range p.Spec.Containers {
				p.Spec.Containers[i].ResizePolicy = nil
			}
		},
		kept: func(p *corev1.Pod) bool { return len(p.Spec.Containers[0].ResizePolicy) > 0 }},
}

// refused returns the parts of among that a validation error names.
func refused(among []optional, msg string) []optional {
	var out []optional
	for _, o := range among {
		if strings.Contains(msg, o.in) {
			out = append(out, o)
		}
	}
	return out
}

func resources(cpuReq, memReq, cpuLim, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// richPod is a pod as users' pods are: a ReplicaSet's, with an init container
// and a sidecar, probes, resources, environment from the downward API, a
// Secret and a ConfigMap, volumes of several kinds, tolerations, affinity,
// topology spread, security contexts, a readiness gate and an active
// deadline, bound to the node. Admission adds the service account's token
// volume and the default tolerations.
func richPod(rsUID string) *corev1.Pod {
	labels := map[string]string{"app.kubernetes.io/name": "web", "pod-template-hash": "6b7f9d8c4", "tier": "frontend"}
	mounts := []corev1.VolumeMount{
		{Name: "cache", MountPath: "/cache"},
		{Name: "config", MountPath: "/etc/web", ReadOnly: true},
		{Name: "tls", MountPath: "/etc/tls", ReadOnly: true},
		{Name: "podinfo", MountPath: "/etc/podinfo", ReadOnly: true},
		{Name: "vault-token", MountPath: "/var/run/secrets/vault", ReadOnly: true},
		{Name: "data", MountPath: "/data", SubPath: "web"},
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName, Namespace: namespace, Labels: labels,
			Annotations: map[string]string{
				"kubectl.kubernetes.io/default-container": "app",
				"prometheus.io/scrape":                    "true",
				"prometheus.io/port":                      "9090",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: replicaSet,
				UID: types.UID(rsUID), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](45),
			ActiveDeadlineSeconds:         ptr.To[int64](86400),
			OS:                            &corev1.PodOS{Name: corev1.Linux},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000),
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
			},
			Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")},
			},
			InitContainers: []corev1.Container{
				{
					Name: "migrate", Image: "registry.example/web-migrate:2.4.1",
					Command:   []string{"/bin/migrate", "--wait-for-db"},
					Env:       []corev1.EnvVar{{Name: "DB_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: "db-url"}}}},
					Resources: resources("100m", "64Mi", "200m", "128Mi"), SecurityContext: restricted,
				},
				{
					Name: sidecarName, Image: "registry.example/fluent-bit:3.1",
					RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					Resources:     resources("50m", "64Mi", "100m", "128Mi"),
					StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/api/v1/health", Port: intstr.FromInt32(2020)}},
						PeriodSeconds: 2, FailureThreshold: 30},
					VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/logs", ReadOnly: true}}, SecurityContext: restricted,
				},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/web:2.4.1", ImagePullPolicy: corev1.PullIfNotPresent,
				Args:  []string{"--listen=:8080", "--metrics=:9090", "--config=/etc/web/config.yaml"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090}},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "MEMORY_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
					{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: "api-key"}}},
					{Name: "FEATURES", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName}, Key: "features", Optional: ptr.To(true)}}},
					{Name: "SELF_URL", Value: "http://$(POD_IP):8080"},
				},
				EnvFrom:   []corev1.EnvFromSource{{Prefix: "WEB_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName}}}},
				Resources: resources("250m", "256Mi", "500m", "512Mi"),
				ResizePolicy: []corev1.ContainerResizePolicy{
					{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
					{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
				},
				VolumeMounts: mounts,
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"),
					HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "liveness"}}}},
					InitialDelaySeconds: 10, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3},
				ReadinessProbe:           &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 5},
				StartupProbe:             &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/web", "check"}}}, FailureThreshold: 20, PeriodSeconds: 3},
				Lifecycle:                &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 5"}}}},
				SecurityContext:          restricted,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("128Mi"))}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName},
					Items: []corev1.KeyToPath{{Key: "config.yaml", Path: "config.yaml"}}}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName, DefaultMode: ptr.To[int32](0o400),
					Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "cpu_limit", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
				}}}},
				{Name: "vault-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName}, Items: []corev1.KeyToPath{{Key: "vault-addr", Path: "addr"}}}},
				}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}}},
			},
			Tolerations: []corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule},
				{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists},
			},
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}}}}},
				PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "web"}}}}}},
			},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "web"}}}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: readinessGate}},
			DNSConfig:      &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}},
			HostAliases:    []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"db.internal"}}},
		},
	}
}

// RunningStatus is the status a node reports for the rich pod p once it runs:
// its init container done, its sidecar and app container running, ready but
// for the readiness gate no one set, as the kubelet reports it.
func RunningStatus(p *corev1.Pod, now metav1.Time) corev1.PodStatus {
	s := *p.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.HostIP, s.HostIPs = "10.20.0.7", []corev1.HostIP{{IP: "10.20.0.7"}}
	s.PodIP, s.PodIPs = "10.244.3.17", []corev1.PodIP{{IP: "10.244.3.17"}}
	s.StartTime = &now
	cond := func(t corev1.PodConditionType, st corev1.ConditionStatus, reason, msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: st, LastTransitionTime: now, Reason: reason, Message: msg}
	}
	s.Conditions = []corev1.PodCondition{
		cond("PodReadyToStartContainers", corev1.ConditionTrue, "", ""),
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", ""),
		cond(corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady",
			`corresponding condition of pod readiness gate "`+readinessGate+`" does not exist.`),
		cond(corev1.ContainersReady, corev1.ConditionTrue, "", ""),
		cond(corev1.PodScheduled, corev1.ConditionTrue, "", ""),
	}
	id := func(name string) string { return "vkubelet://" + string(p.UID) + "/" + name }
	running := func(c corev1.Container) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + strings.Repeat("ab", 32),
			ContainerID: id(c.Name), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	}
	s.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil {
			s.InitContainerStatuses = append(s.InitContainerStatuses, running(c))
			continue
		}
		st := running(c)
		st.Ready, st.Started = true, ptr.To(false)
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: now, FinishedAt: now, ContainerID: st.ContainerID}}
		s.InitContainerStatuses = append(s.InitContainerStatuses, st)
	}
	s.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, running(c))
	}
	return s
}

// ephemeralContainer is the debugging container added to the running pod.
func ephemeralContainer() corev1.EphemeralContainer {
	return corev1.EphemeralContainer{TargetContainerName: "app", EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: ephemeralName, Image: "busybox:1.36", Command: []string{"sh"}, Stdin: true, TTY: true,
		ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}}
}
