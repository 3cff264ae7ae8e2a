package podpack

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// dictionaryPod is the pod whose encoding is the dictionary: a pod of a
// Deployment as the API server stores it once the ServiceAccount admission
// plugin, the defaulting and the scheduler have done their part, and as a
// kubelet reports it running. What matters is the strings it shares with the
// pods people run (paths, the token volume's sources, default values, condition
// types and reasons, well-known label and taint keys); where a real pod has its
// own names, values here are placeholders.
func dictionaryPod() *corev1.Pod {
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const (
		app           = "web"
		replicaSet    = "web-5d8f9c7b6c"
		volume        = "kube-api-access-x7k2p"
		saMountPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
		image         = "registry.k8s.io/e2e-test-images/agnhost:2.53"
		imageID       = "registry.k8s.io/e2e-test-images/agnhost@sha256:99c6b4bb4a1e1df3f0b3752168c89358794d02258ebebc26bf21c29399011a85"
		podIP, hostIP = "10.244.1.23", "10.0.0.5"
	)
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              replicaSet + "-q2w4z",
			GenerateName:      replicaSet + "-",
			Namespace:         "default",
			UID:               "0f3c9a52-6b1e-4d27-9c8a-5e4b7d2f1a60",
			ResourceVersion:   "123456",
			CreationTimestamp: at,
			Labels:            map[string]string{"app": app, "pod-template-hash": "5d8f9c7b6c", "app.kubernetes.io/name": app, "app.kubernetes.io/instance": app},
			Annotations:       map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: replicaSet,
				UID: "7a1d4e90-2c3b-4f58-8e6d-1b9c0a7f3e24", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o644),
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
					}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
						Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
					}}}},
				},
			}}}},
			Containers: []corev1.Container{{
				Name: app, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
					{Name: "LOG_LEVEL", Value: "info"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: volume, ReadOnly: true, MountPath: saMountPath}},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "default",
			DeprecatedServiceAccount:      "default",
			NodeName:                      "node-1",
			SecurityContext:               &corev1.PodSecurityContext{},
			SchedulerName:                 corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
			Priority:           ptr.To[int32](0),
			EnableServiceLinks: ptr.To(true),
			PreemptionPolicy:   ptr.To(corev1.PreemptLowerPriority),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: at},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at},
			},
			HostIP:    hostIP,
			HostIPs:   []corev1.HostIP{{IP: hostIP}},
			PodIP:     podIP,
			PodIPs:    []corev1.PodIP{{IP: podIP}},
			StartTime: &at,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: app, State: running, Ready: true, Started: ptr.To(true),
				Image: image, ImageID: imageID,
				ContainerID: "containerd://4b8f2e6a1c9d3f7b5e0a2c4d6f8b1a3c5e7d9f0b2a4c6e8d1f3b5a7c9e0d2f4a",
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: "Error", StartedAt: at, FinishedAt: at,
				}},
				VolumeMounts: []corev1.VolumeMountStatus{{Name: volume, MountPath: saMountPath, ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)}},
			}},
			QOSClass: corev1.PodQOSBurstable,
		},
	}
}
