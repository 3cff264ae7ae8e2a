// Package clockwait runs apimachinery's wait loops (k8s.io/apimachinery/pkg/util/wait)
// on an injected clock (k8s.io/utils/clock), so that a test drives a retry or a
// back-off with a fake clock instead of sleeping.
//
// wait times its loops on the real clock. It takes another clock only through a
// BackoffManager, whose constructors (NewExponentialBackoffManager,
// NewJitteredBackoffManager) are deprecated, and none of its loops takes the
// DelayFunc.Timer meant to replace them. Backoff is such a manager, made of a
// DelayFunc and a clock; Until is wait.BackoffUntilWithContext with it, stopped
// by a condition. This package is no loop of its own, and code on the real clock
// calls wait directly.
//
// The pod controller's first listing of the provider's pods, the fleet's restarts
// of failed nodes and renewals of its membership Lease, and node removal use it.
package clockwait

import (
	"context"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Backoff returns a wait.BackoffManager whose waits are timers of clk, each as
// long as delay says (a wait.Backoff's DelayFunc, say): what
// wait.BackoffUntilWithContext waits on between two calls.
func Backoff(clk clock.Clock, delay wait.DelayFunc) wait.BackoffManager {
	return manager{clk: clk, delay: delay}
}

type manager struct {
	clk   clock.Clock
	delay wait.DelayFunc
}

// Backoff makes a timer each time: wait.BackoffUntilWithContext has received
// from the one before, or stopped it.
func (m manager) Backoff() clock.Timer { return m.clk.NewTimer(m.delay()) }

// Until calls condition at once, then after each of b's delays on clk, until it
// returns true or an error, or ctx ends: b.DelayFunc().Until(ctx, true, true,
// condition) on clk. Once b's Steps are spent or its Cap is reached, the waits go
// on at the last delay (jittered), where wait.ExponentialBackoffWithContext would
// give up; a wait.Backoff of Duration alone polls every Duration. As in wait's
// loops, the first call is made even if ctx has ended. Until returns condition's
// error, or ctx's if ctx ended first.
func Until(ctx context.Context, clk clock.Clock, b wait.Backoff, condition wait.ConditionWithContextFunc) error {
	ok, err := condition(ctx)
	if ok || err != nil {
		return err
	}
	loop, stop := context.WithCancel(ctx)
	defer stop()
	first := true
	wait.BackoffUntilWithContext(loop, func(ctx context.Context) {
		if first { // made above, before BackoffUntilWithContext's first wait
			first = false
			return
		}
		if ok, err = condition(ctx); ok || err != nil {
			stop()
		}
	}, Backoff(clk, b.DelayFunc()), true)
	if ok || err != nil {
		return err
	}
	return ctx.Err()
}
