package cri

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file holds the restart policy and the back-offs of sandbox creation,
// container restarts after a crash, and retries after a failed start.

// shouldRestart reports whether container c of the pod, which exited with
// exitCode, is to be started again, as the kubelet decides it: by the first of
// the container's restartPolicyRules that matches the exit code (Restart, or
// RestartAllContainers: restartall.go), else by its own restartPolicy, else by
// the pod's. (Rules count only with a container restartPolicy, which the API
// requires of them.)
func shouldRestart(c *corev1.Container, pod *corev1.Pod, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := firstMatchingRule(c, exitCode); ok {
			switch rule.Action {
			case corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleActionRestartAllContainers:
				return true
			}
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// firstMatchingRule is the first of c's restartPolicyRules whose exit codes
// match exitCode.
func firstMatchingRule(c *corev1.Container, exitCode int32) (corev1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if exitCodesMatch(rule.ExitCodes, exitCode) {
			return rule, true
		}
	}
	return corev1.ContainerRestartRule{}, false
}

// exitCodesMatch reports whether a rule's exit codes match code.
func exitCodesMatch(r *corev1.ContainerRestartRuleOnExitCodes, code int32) bool {
	if r == nil {
		return false
	}
	in := slices.Contains(r.Values, code)
	switch r.Operator {
	case corev1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

// nextDelay moves the back-off of key (client-go's flowcontrol, as the kubelet's
// crash loops use) to its next delay, from BackoffBase doubling up to BackoffMax,
// and returns it. at is when the failure happened: a back-off not moved for twice
// BackoffMax before it starts again from BackoffBase (a container that ran that
// long is no crash loop).
func (p *Provider) nextDelay(key string, at time.Time) time.Duration {
	p.backoffs.Next(key, at)
	return p.backoffs.Get(key)
}

// backoffKey names a back-off: of the pod's sandbox, or of one container's
// restarts after a crash ("crash") or tries after a failure to start ("start").
func backoffKey(uid types.UID, container, kind string) string {
	return string(uid) + "/" + container + "/" + kind
}

// forgetBackoffs drops the pod's back-offs once it is gone.
func (p *Provider) forgetBackoffs(rec *podRecord) {
	p.backoffs.DeleteEntry(backoffKey(rec.uid, "", "sandbox"))
	for name := range rec.ctrs {
		p.backoffs.DeleteEntry(backoffKey(rec.uid, name, "crash"))
		p.backoffs.DeleteEntry(backoffKey(rec.uid, name, "start"))
	}
}
