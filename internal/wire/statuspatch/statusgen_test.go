package statuspatch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusGen makes random pod statuses and changes to them, from a few values of
// each field so that changes often meet.
type statusGen struct{ r *rand.Rand }

var (
	genPhases     = []corev1.PodPhase{"", corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}
	genTexts      = []string{"", "", "OOMKilled", "Back-off pulling image", `quote " backslash \`, "line\nbreak", "ü ✓ <&>"}
	genConditions = []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
		corev1.DisruptionTarget, "example.com/gate"}
	genIPs       = []string{"10.244.0.7", "10.244.0.8", "fd00::7", "192.168.1.1"}
	genStatuses  = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}
	genResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, "example.com/gpu"}
)

func pick[E any](r *rand.Rand, from []E) E { return from[r.IntN(len(from))] }

func (g statusGen) chance(n int) bool { return g.r.IntN(n) == 0 }

// time is none, or a whole or part second around t0.
func (g statusGen) time() metav1.Time {
	if g.chance(4) {
		return metav1.Time{}
	}
	return metav1.NewTime(t0.Add(time.Duration(g.r.IntN(4))*time.Second + time.Duration(g.r.IntN(2))*300*time.Millisecond))
}

func (g statusGen) timePtr() *metav1.Time {
	if g.chance(3) {
		return nil
	}
	t := g.time()
	return &t
}

func (g statusGen) condition(typ corev1.PodConditionType) corev1.PodCondition {
	return corev1.PodCondition{Type: typ, Status: pick(g.r, genStatuses), ObservedGeneration: int64(g.r.IntN(3)),
		LastProbeTime: g.time(), LastTransitionTime: g.time(), Reason: pick(g.r, genTexts), Message: pick(g.r, genTexts)}
}

func (g statusGen) conditions() []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, i := range g.r.Perm(len(genConditions))[:g.r.IntN(len(genConditions)+1)] {
		out = append(out, g.condition(genConditions[i]))
	}
	if len(out) > 0 && g.chance(50) { // the API does not forbid a repeated type
		out = append(out, g.condition(out[0].Type))
	}
	return out
}

// ips are the indexes in genIPs of up to two addresses, rarely one repeated,
// which the API refuses but Build must still handle as the generic diff does.
func (g statusGen) ips() []int {
	out := g.r.Perm(len(genIPs))[:g.r.IntN(3)]
	if len(out) > 0 && g.chance(40) {
		out = append(out, out[0])
	}
	return out
}

func (g statusGen) podIPs() []corev1.PodIP {
	var out []corev1.PodIP
	for _, i := range g.ips() {
		out = append(out, corev1.PodIP{IP: genIPs[i]})
	}
	return out
}

func (g statusGen) hostIPs() []corev1.HostIP {
	var out []corev1.HostIP
	for _, i := range g.ips() {
		out = append(out, corev1.HostIP{IP: genIPs[i]})
	}
	return out
}

func (g statusGen) state() corev1.ContainerState {
	switch g.r.IntN(4) {
	case 0:
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: pick(g.r, genTexts), Message: pick(g.r, genTexts)}}
	case 1:
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: g.time()}}
	case 2:
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(g.r.IntN(3)) * 137, Signal: int32(g.r.IntN(2)) * 9,
			Reason: pick(g.r, genTexts), Message: pick(g.r, genTexts), StartedAt: g.time(), FinishedAt: g.time(), ContainerID: "cri://" + pick(g.r, genTexts)}}
	}
	return corev1.ContainerState{}
}

func (g statusGen) containers() []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for i := range g.r.IntN(4) {
		cs := corev1.ContainerStatus{Name: fmt.Sprint("c", i), State: g.state(), LastTerminationState: g.state(), Ready: g.chance(2),
			RestartCount: int32(g.r.IntN(3)), Image: "img:" + fmt.Sprint(g.r.IntN(2)), ImageID: pick(g.r, genTexts)}
		if g.chance(3) {
			started := g.chance(2)
			cs.Started = &started
		}
		if g.chance(5) {
			cs.AllocatedResources = g.resources()
		}
		out = append(out, cs)
	}
	return out
}

func (g statusGen) resources() corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, i := range g.r.Perm(len(genResources))[:g.r.IntN(len(genResources)+1)] {
		out[genResources[i]] = *resource.NewMilliQuantity(int64(g.r.IntN(3))*500, resource.DecimalSI)
	}
	return out
}

func (g statusGen) claims() []corev1.PodResourceClaimStatus {
	var out []corev1.PodResourceClaimStatus
	for _, i := range g.r.Perm(3)[:g.r.IntN(3)] {
		c := corev1.PodResourceClaimStatus{Name: fmt.Sprint("claim", i)}
		if g.chance(2) {
			name := fmt.Sprint("pod-claim", g.r.IntN(2))
			c.ResourceClaimName = &name
		}
		out = append(out, c)
	}
	return out
}

// status is a random status, every field possibly set.
func (g statusGen) status() corev1.PodStatus {
	s := corev1.PodStatus{ObservedGeneration: int64(g.r.IntN(3)), Phase: pick(g.r, genPhases), Message: pick(g.r, genTexts),
		Reason: pick(g.r, genTexts), StartTime: g.timePtr(), Conditions: g.conditions(), PodIPs: g.podIPs(), HostIPs: g.hostIPs(),
		ContainerStatuses: g.containers()}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	if len(s.HostIPs) > 0 {
		s.HostIP = s.HostIPs[0].IP
	}
	if g.chance(3) {
		s.InitContainerStatuses = g.containers()
	}
	if g.chance(5) {
		s.EphemeralContainerStatuses = g.containers()
	}
	if g.chance(4) {
		s.NominatedNodeName, s.QOSClass, s.Resize = pick(g.r, genTexts), corev1.PodQOSBurstable, corev1.PodResizeStatusInProgress
	}
	if g.chance(4) {
		s.ResourceClaimStatuses, s.AllocatedResources = g.claims(), g.resources()
	}
	if g.chance(8) {
		s.VolumeHealth = []corev1.PodVolumeHealth{{Name: "data", LastTransitionTime: g.time()}}
	}
	return s
}

// mutate returns a copy of s with a few random changes, of the kinds a provider's
// status makes: phase, texts, conditions added, removed, changed or reordered,
// addresses, container states, times set, cleared or moved within the second.
func (g statusGen) mutate(s corev1.PodStatus) corev1.PodStatus {
	d := *s.DeepCopy()
	for range 1 + g.r.IntN(4) {
		switch g.r.IntN(14) {
		case 0:
			d.Phase = pick(g.r, genPhases)
		case 1:
			d.Message, d.Reason = pick(g.r, genTexts), pick(g.r, genTexts)
		case 2:
			d.StartTime = g.timePtr()
		case 3: // a condition added, or one of its fields changed
			typ := pick(g.r, genConditions)
			i := slices.IndexFunc(d.Conditions, func(c corev1.PodCondition) bool { return c.Type == typ })
			if i < 0 {
				d.Conditions = append(d.Conditions, g.condition(typ))
				break
			}
			c := &d.Conditions[i]
			switch g.r.IntN(4) {
			case 0:
				c.Status = pick(g.r, genStatuses)
			case 1:
				c.Reason, c.Message = "", ""
			case 2:
				c.LastProbeTime, c.LastTransitionTime = g.time(), g.time()
			case 3:
				c.ObservedGeneration = int64(g.r.IntN(3))
			}
		case 4:
			if len(d.Conditions) > 0 {
				i := g.r.IntN(len(d.Conditions))
				d.Conditions = slices.Delete(d.Conditions, i, i+1)
			}
		case 5:
			g.r.Shuffle(len(d.Conditions), func(i, j int) { d.Conditions[i], d.Conditions[j] = d.Conditions[j], d.Conditions[i] })
		case 6:
			d.PodIPs = g.podIPs()
			d.PodIP = ""
			if len(d.PodIPs) > 0 {
				d.PodIP = d.PodIPs[0].IP
			}
		case 7:
			d.HostIPs = g.hostIPs()
		case 8:
			if len(d.ContainerStatuses) > 0 {
				cs := &d.ContainerStatuses[g.r.IntN(len(d.ContainerStatuses))]
				cs.State, cs.Ready, cs.RestartCount = g.state(), g.chance(2), cs.RestartCount+int32(g.r.IntN(2))
			} else {
				d.ContainerStatuses = g.containers()
			}
		case 9:
			d.InitContainerStatuses = g.containers()
		case 10:
			d.ObservedGeneration = int64(g.r.IntN(3))
		case 11:
			d.ResourceClaimStatuses, d.AllocatedResources = g.claims(), g.resources()
		case 12:
			d.Conditions = nil
		case 13:
			d = g.status()
		}
	}
	return d
}
