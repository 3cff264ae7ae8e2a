package cri

import (
	"k8s.io/component-helpers/nodedeclaredfeatures/features/inplacepodresize"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/restartallcontainers"
)

// DeclaredFeatures are the features of Kubernetes' node declared features the
// CRI provider supports (provider.FeatureDeclarer), by the library's names:
//
//   - InPlacePodVerticalScalingInitContainers: init containers are resized as
//     the others are (resize.go); one running gets its new cgroup limits in
//     place, one done runs with them if it runs again. (Sidecars need no
//     declaration: the API server takes their resizes from any node that
//     resizes in place.)
//   - RestartAllContainersOnContainerExits: a restartPolicyRules action
//     RestartAllContainers restarts the whole pod in its sandbox (restartall.go).
//   - InPlacePodLevelResourcesVerticalScaling: the pod-level resources are
//     resized in place, the pod's cgroup and those of the containers under
//     its limits (podcgroup.go, resize.go).
//
// Not declared: InPlacePodVerticalScalingMemoryBackedVolumes (a tmpfs
// emptyDir keeps its size), ExtendWebSocketsToKubelet (a matter of the node's
// kubelet API, not of a provider), and the DRA and mount features.
func (p *Provider) DeclaredFeatures() []string {
	return []string{
		inplacepodresize.NonSidecarInitContainerResizeFeature.Name(),
		restartallcontainers.Feature.Name(),
		inplacepodresize.PodLevelResourcesResizeFeature.Name(),
	}
}
