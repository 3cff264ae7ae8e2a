package pod

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// reasonReadinessGatesNotReady is the Ready condition's reason while a pod's
// containers are ready and one of its readiness gates is not: the kubelet's,
// which tools and people look for.
const reasonReadinessGatesNotReady = "ReadinessGatesNotReady"

// gatedReady returns the provider's Ready condition ready as the pod's readiness
// gates allow it. A pod with spec.readinessGates is Ready only once each gate's
// condition, written into the pod's status by some other controller (a load
// balancer's, typically, once the pod is registered behind it), is True; until
// then it is not Ready even though its containers are, as on a kubelet, so that
// a rollout does not go on and Services do not send traffic too soon.
//
// A Ready condition that is not True is left as the provider says. conds are the
// pod's conditions; a gate whose type repeats there is judged by the first, as
// the kubelet does.
func gatedReady(ready corev1.PodCondition, gates []corev1.PodReadinessGate, conds []corev1.PodCondition) corev1.PodCondition {
	if ready.Status != corev1.ConditionTrue || len(gates) == 0 {
		return ready
	}
	var unready []string
	for _, g := range gates {
		c := findCondition(conds, g.ConditionType)
		switch {
		case c == nil:
			unready = append(unready, fmt.Sprintf("readiness gate %q has no condition in the pod's status yet", g.ConditionType))
		case c.Status != corev1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("readiness gate %q is %s, not True", g.ConditionType, c.Status))
		}
	}
	if len(unready) == 0 {
		return ready
	}
	ready.Status = corev1.ConditionFalse
	ready.Reason = reasonReadinessGatesNotReady
	ready.Message = strings.Join(unready, "; ")
	return ready
}
