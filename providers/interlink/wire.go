package interlink

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the plugin API's messages and the mapping between them and
// vkubelet's pods: the /create entry of a resolved pod, the phase of a /status
// answer.

// The plugin API's messages.

type podData struct {
	Pod        corev1.Pod      `json:"pod"`
	Containers []containerData `json:"container"`
}

type containerData struct {
	Name                string             `json:"name"`
	ConfigMaps          []corev1.ConfigMap `json:"configMaps"`
	ProjectedVolumeMaps []corev1.ConfigMap `json:"projectedvolumemaps"`
	Secrets             []corev1.Secret    `json:"secrets"`
	EmptyDirs           []string           `json:"emptyDirs"`
}

type createdJob struct {
	PodUID string `json:"PodUID"`
	PodJID string `json:"PodJID"`
}

type podStatus struct {
	Name           string                   `json:"name"`
	UID            string                   `json:"UID"`
	Namespace      string                   `json:"namespace"`
	JID            string                   `json:"JID"`
	Containers     []corev1.ContainerStatus `json:"containers"`
	InitContainers []corev1.ContainerStatus `json:"initContainers"`
}

type logRequest struct {
	Namespace     string     `json:"Namespace"`
	PodUID        string     `json:"PodUID"`
	PodName       string     `json:"PodName"`
	ContainerName string     `json:"ContainerName"`
	Opts          logOptions `json:"Opts"`
}

type logOptions struct {
	Tail         int       `json:"Tail"`
	Bytes        int       `json:"Bytes"`
	Timestamps   bool      `json:"Timestamps"`
	Follow       bool      `json:"Follow"`
	Previous     bool      `json:"Previous"`
	SinceSeconds int       `json:"SinceSeconds"`
	SinceTime    time.Time `json:"SinceTime"`
}

// retrievedPod is the /create entry of a pod: for each container, the
// ConfigMaps, Secrets and projected volumes its mounts use, with vkubelet's
// resolved files as their data.
func retrievedPod(rp *provider.ResolvedPod) podData {
	out := podData{Pod: *rp.Pod.DeepCopy()}
	vols := map[string]corev1.Volume{}
	for _, v := range rp.Pod.Spec.Volumes {
		vols[v.Name] = v
	}
	containers := append(append([]corev1.Container{}, rp.Pod.Spec.InitContainers...), rp.Pod.Spec.Containers...)
	for _, c := range containers {
		cd := containerData{Name: c.Name, ConfigMaps: []corev1.ConfigMap{}, ProjectedVolumeMaps: []corev1.ConfigMap{},
			Secrets: []corev1.Secret{}, EmptyDirs: []string{}}
		for _, m := range c.VolumeMounts {
			v, ok := vols[m.Name]
			if !ok {
				continue
			}
			files := rp.Volumes[v.Name]
			meta := metav1.ObjectMeta{Name: v.Name, Namespace: rp.Pod.Namespace}
			switch {
			case v.ConfigMap != nil:
				meta.Name = v.ConfigMap.Name
				cm := corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{}}
				for _, f := range filesOf(files) {
					cm.Data[f.Path] = string(f.Data)
				}
				cd.ConfigMaps = append(cd.ConfigMaps, cm)
			case v.Secret != nil:
				meta.Name = v.Secret.SecretName
				s := corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{}}
				for _, f := range filesOf(files) {
					s.Data[f.Path] = f.Data
				}
				cd.Secrets = append(cd.Secrets, s)
			case v.Projected != nil || v.DownwardAPI != nil:
				cm := corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{}}
				for _, f := range filesOf(files) {
					cm.Data[f.Path] = string(f.Data)
				}
				cd.ProjectedVolumeMaps = append(cd.ProjectedVolumeMaps, cm)
			case v.EmptyDir != nil:
				cd.EmptyDirs = append(cd.EmptyDirs, v.Name)
			}
		}
		out.Containers = append(out.Containers, cd)
	}
	return out
}

func filesOf(v *provider.VolumeContents) []provider.VolumeFile {
	if v == nil {
		return nil
	}
	return v.Files
}

// podPhase is the pod status the plugin's container statuses amount to, as the
// kubelet derives a phase: Running while a container runs, Succeeded or Failed
// once all have terminated (by exit codes and the restart policy), Pending before.
// An answer that names a container the pod does not have, or one twice, is an
// error: counted as it is, it could make a pod Succeeded that never ran.
func podPhase(pod *corev1.Pod, st podStatus, prev *corev1.PodStatus) (*corev1.PodStatus, error) {
	if err := checkContainerStatuses(pod.Spec.Containers, st.Containers); err != nil {
		return nil, err
	}
	if err := checkContainerStatuses(pod.Spec.InitContainers, st.InitContainers); err != nil {
		return nil, fmt.Errorf("init containers: %w", err)
	}
	out := &corev1.PodStatus{ContainerStatuses: st.Containers, InitContainerStatuses: st.InitContainers, Message: "job " + st.JID}
	if prev != nil {
		out.StartTime = prev.StartTime
	}
	running, terminated, failed := 0, 0, 0
	for _, c := range st.Containers {
		switch {
		case c.State.Running != nil:
			running++
		case c.State.Terminated != nil:
			terminated++
			if c.State.Terminated.ExitCode != 0 {
				failed++
			}
		}
	}
	n := len(pod.Spec.Containers)
	switch {
	case n > 0 && terminated == n && failed == 0:
		out.Phase = corev1.PodSucceeded
	case n > 0 && terminated == n:
		out.Phase = corev1.PodFailed
	case running > 0:
		out.Phase = corev1.PodRunning
	default:
		out.Phase = corev1.PodPending
	}
	if out.Phase != corev1.PodPending && out.StartTime == nil {
		now := metav1.Now()
		out.StartTime = &now
	}
	ready := corev1.ConditionFalse
	if out.Phase == corev1.PodRunning && running == n {
		ready = corev1.ConditionTrue
		for i := range out.ContainerStatuses {
			out.ContainerStatuses[i].Ready = out.ContainerStatuses[i].State.Running != nil
		}
	}
	out.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}, {Type: corev1.ContainersReady, Status: ready},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	return out, nil
}

// checkContainerStatuses says what is wrong with a plugin's statuses of the
// containers spec: each names one of them, none twice.
func checkContainerStatuses(spec []corev1.Container, statuses []corev1.ContainerStatus) error {
	seen := make(map[string]bool, len(statuses))
	for _, c := range statuses {
		if !slices.ContainsFunc(spec, func(s corev1.Container) bool { return s.Name == c.Name }) {
			return fmt.Errorf("the plugin reports container %q, which the pod does not have", c.Name)
		}
		if seen[c.Name] {
			return fmt.Errorf("the plugin reports container %q twice", c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}
