package testenv

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ContainerInstances describes the instances of p's containers as its status
// records them: the pod's UID and, per container, its ID, when it started and
// its restart count. Two equal descriptions are the same instances, so a test
// compares them before and after what must leave a pod alone (an upgrade, a
// node's restart).
func ContainerInstances(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "UID %s", p.UID)
	for _, cs := range p.Status.ContainerStatuses {
		started := "not running"
		if cs.State.Running != nil {
			started = "started " + cs.State.Running.StartedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "; %s: %s %s, %d restarts", cs.Name, cs.ContainerID, started, cs.RestartCount)
	}
	return b.String()
}
