package cri

import (
	"context"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// This file holds RestartAllContainers, the restartPolicyRules action of
// Kubernetes' RestartAllContainersOnContainerExits: when an init or app
// container exits with a code whose first matching rule says
// RestartAllContainers, the whole pod starts over in its sandbox, as on a
// kubelet. Every init and app container still running is killed at once (no
// grace period, no preStop hook: the kubelet kills them so), and the pod begins
// a new round: its init containers run again in order, then its app
// containers, each as a new instance whose restart count goes on from the last
// and whose last state is the instance of the round before. Ephemeral
// containers are left alone. The sandbox, its network and the pod's volumes
// stay.
//
// The rounds are counted on the containers themselves (labelRound), so a
// restart of the provider finds where the pod was: an instance of an earlier
// round is reset (ctrState.reset) and starts again. While the containers are
// being killed the pod's status says so with the condition
// AllContainersRestarting (reason RestartAllContainersStarted), False
// otherwise, for a pod with such a rule, as the kubelet reports it.

// labelRound on a container is the round of the pod it was created in.
const labelRound = "vkubelet.io/round"

// Condition AllContainersRestarting while a RestartAllContainers is under way.
const (
	reasonRestartAllStarted  = "RestartAllContainersStarted"
	messageRestartAllStarted = "container exited with restart policy rule"
)

func roundOf(c *runtimeapi.Container) uint32 {
	n, _ := strconv.ParseUint(c.GetLabels()[labelRound], 10, 32)
	return uint32(n)
}

// restartsAll reports whether c's first restartPolicyRules matching exitCode
// says RestartAllContainers.
func restartsAll(c *corev1.Container, exitCode int32) bool {
	rule, ok := firstMatchingRule(c, exitCode)
	return ok && rule.Action == corev1.ContainerRestartRuleActionRestartAllContainers
}

// mayRestartAll reports whether one of the pod's init or app containers has a
// rule RestartAllContainers: its status carries the AllContainersRestarting
// condition.
func mayRestartAll(pod *corev1.Pod) bool {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, rule := range c.RestartPolicyRules {
			if rule.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
				return true
			}
		}
	}
	return false
}

// restartAllTrigger is the init or app container whose instance of this round
// exited with a code that asks to restart all containers, or "".
func restartAllTrigger(rec *podRecord, pod *corev1.Pod) string {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		st := rec.ctrs[c.Name]
		if st == nil || st.cur == nil || st.stale || st.reset || st.cur.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		if restartsAll(&c, st.cur.ExitCode) {
			return c.Name
		}
	}
	return ""
}

// restartAll kills the pod's init and app containers still running, app
// containers first and the last in the spec first, as the kubelet does, and
// begins a new round once they are all stopped. It reports whether it did: a
// container that would not stop leaves the round as it is, and the trigger
// still there for the next sync to try again.
func (p *Provider) restartAll(ctx context.Context, rec *podRecord, pod *corev1.Pod, trigger string) bool {
	p.log.Info("restarting all containers of the pod, as a restartPolicyRules of the container that exited asks", "pod", rec.key, "container", trigger, "exitCode", rec.ctrs[trigger].cur.ExitCode)
	rec.restartingAll = true
	p.publish(rec, computeStatus(rec, pod, p.hostIPNow()))
	defer func() { rec.restartingAll = false }()
	all := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	slices.Reverse(all)
	stopped := true
	for _, c := range all {
		st := rec.ctrs[c.Name]
		if st == nil || st.cur == nil || st.stale || st.cur.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := p.runtime.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: st.cur.Id, Timeout: 0})
		cancel()
		if err != nil {
			p.log.Warn("killing a container to restart all", "pod", rec.key, "container", c.Name, "err", err)
			stopped = false
		}
	}
	if !stopped {
		return false
	}
	rec.round++
	for _, c := range all {
		// What a container waited for in the round before (a crash loop's
		// back-off) is over: the new round starts each one at once.
		if st := rec.ctrs[c.Name]; st != nil {
			st.retryAt, st.waitReason, st.waitMessage = time.Time{}, "", ""
		}
	}
	return true
}

// allContainersRestarting is the pod's condition AllContainersRestarting, for a
// pod that has a RestartAllContainers rule (mayRestartAll), of phase phase.
func allContainersRestarting(rec *podRecord, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.AllContainersRestarting, Status: corev1.ConditionFalse}
	switch {
	case phase == corev1.PodSucceeded:
		c.Reason = "PodCompleted"
	case phase == corev1.PodFailed:
		c.Reason = "PodFailed"
	case rec.restartingAll:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, reasonRestartAllStarted, messageRestartAllStarted
	}
	return c
}
