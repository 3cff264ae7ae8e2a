package mock

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/errdefs"
)

// answerLate waits the configured Latency, or until ctx ends.
func (p *Provider) answerLate(ctx context.Context) error {
	if p.cfg.Latency.Duration <= 0 {
		return nil
	}
	t := p.clock.NewTimer(p.cfg.Latency.Duration)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// injectFailure returns the injected error of a call that is to fail, or nil.
func (p *Provider) injectFailure(op string, pod *corev1.Pod) error {
	if p.rng == nil {
		return nil
	}
	p.failMu.Lock()
	fail := p.rng.Float64() < p.cfg.FailureRate
	p.failMu.Unlock()
	if !fail {
		return nil
	}
	return errdefs.Unavailable("mock: injected failure: %s %s/%s", op, pod.Namespace, pod.Name)
}
