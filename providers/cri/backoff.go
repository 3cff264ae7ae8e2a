package cri

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file holds the restart policy and the back-offs of sandbox creation,
// container restarts after a crash, and retries after a failed start.

func shouldRestart(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
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
