package pod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/errdefs"
)

// Event reasons the controller records on pods.
const (
	ReasonProviderFailed = "ProviderFailed" // a provider call failed; the message says which and why
	ReasonProviderLost   = "ProviderLost"   // the provider lost a pod whose restart policy forbids starting it again
	ReasonCreated        = "ProviderCreated" // the provider accepted the pod
	ReasonUpdated        = "ProviderUpdated" // the provider accepted a change of an updatable field
	ReasonKilling        = "Killing"         // the provider was asked to stop the pod (the kubelet's reason)
)

// syncHandler makes the provider run the API's version of the pod: create it if the
// provider lacks it, update it if an updatable field changed, replace it if the
// provider runs an older pod of the same name.
func (c *Controller) syncHandler(ctx context.Context, key string) error {
	unlock := c.state.lock(key)
	defer unlock()

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key never becomes valid
	}
	p, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.deleteQueue.Add(key)
		return nil
	}
	if err != nil {
		return err
	}
	if p.DeletionTimestamp != nil {
		c.deleteQueue.Add(key)
		return nil
	}
	if isTerminal(&p.Status) {
		return nil // finished pods are left alone but for deletion
	}

	st := c.state.get(key)
	if st.providerUID != "" && st.providerUID != p.UID {
		// The provider still runs an earlier pod of this name: stop it first.
		if err := c.deleteFromProvider(ctx, st.lastPod); err != nil {
			return err
		}
		c.state.forget(key)
		st = podState{}
	}

	if st.providerUID == "" {
		if hasStarted(&p.Status) && p.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// It ran before and the provider lost it (a crash of the back end, a
			// restart that did not keep it): with restartPolicy Never the kubelet
			// would not start it again either.
			return c.markLost(ctx, p)
		}
		return c.createInProvider(ctx, key, p)
	}

	want := updatableOf(p)
	if st.applied != nil && st.applied.equal(want) {
		return nil
	}
	if err := c.callProvider(ctx, p, "UpdatePod", func(ctx context.Context) error {
		return c.provider.UpdatePod(ctx, p.DeepCopy())
	}); err != nil {
		return err
	}
	c.state.update(key, func(s *podState) { s.applied, s.lastPod = want, p.DeepCopy() })
	c.recorder.Event(p, corev1.EventTypeNormal, ReasonUpdated, "Provider applied the pod's new spec")
	return nil
}

func (c *Controller) createInProvider(ctx context.Context, key string, p *corev1.Pod) error {
	err := c.callProvider(ctx, p, "CreatePod", func(ctx context.Context) error {
		return c.provider.CreatePod(ctx, p.DeepCopy())
	})
	if err != nil {
		return err
	}
	c.state.update(key, func(s *podState) {
		s.providerUID, s.applied, s.lastPod = p.UID, updatableOf(p), p.DeepCopy()
		s.deleteRequested, s.notified = "", nil
	})
	c.log.Debug("pod created in provider", "pod", key)
	c.recorder.Event(p, corev1.EventTypeNormal, ReasonCreated, "Pod handed to the provider")
	if c.notifier == nil {
		c.statusQueue.Add(key) // read the first status now, not at the next poll
	}
	return nil
}

// callProvider runs one provider call for pod p, counting it in the metrics and, on
// failure, recording an Event and putting the reason in the pod's status.
func (c *Controller) callProvider(ctx context.Context, p *corev1.Pod, method string, call func(context.Context) error) error {
	done := c.metrics.observeProviderCall(method)
	err := call(ctx)
	done(err)
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%s failed: %v", method, err)
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonProviderFailed, msg)
	if method != "DeletePod" {
		if werr := c.writeStatus(ctx, p, &corev1.PodStatus{
			Phase: p.Status.Phase, Reason: ReasonProviderFailed, Message: msg,
		}); werr != nil {
			c.log.Warn("cannot record provider failure in pod status", "pod", keyOf(p), "error", werr)
		}
	}
	return fmt.Errorf("%s %s: %w", method, keyOf(p), err)
}

// markLost ends a pod that the provider lost and may not restart.
func (c *Controller) markLost(ctx context.Context, p *corev1.Pod) error {
	msg := "the provider no longer runs this pod and its restartPolicy Never forbids starting it again"
	c.recorder.Event(p, corev1.EventTypeWarning, ReasonProviderLost, msg)
	status := &corev1.PodStatus{Phase: corev1.PodFailed, Reason: ReasonProviderLost, Message: msg}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: ReasonProviderLost, Message: msg,
			}}
			cs.Ready, cs.Started = false, ptr.To(false)
		}
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
	}
	return c.writeStatus(ctx, p, status)
}

// deleteFromProvider stops p in the provider; a provider that no longer has it has
// done what was asked.
func (c *Controller) deleteFromProvider(ctx context.Context, p *corev1.Pod) error {
	if p == nil {
		return nil
	}
	err := c.callProvider(ctx, p, "DeletePod", func(ctx context.Context) error {
		err := c.provider.DeletePod(ctx, p.DeepCopy())
		if errdefs.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil && errors.Is(err, context.Canceled) {
		return ctx.Err()
	}
	return err
}
