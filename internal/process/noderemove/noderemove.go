// Package noderemove takes a virtual node out of the cluster for good, as an
// operator takes out a kubelet's with kubectl drain and kubectl delete node: it
// cordons the Node and marks it for removal (node.RemovalAnnotation), evicts the
// pods bound to it through the Eviction API, so that PodDisruptionBudgets hold,
// and waits until they are gone; then it deletes the Node, evicts the DaemonSet
// pods that the Node's deletion leaves without a controller to put them back,
// and deletes the node's Lease.
//
// It is a client of the API and nothing more. The node's process, which must
// still run, is what stops each evicted pod in the provider and removes it from
// the API only once the provider confirmed it stopped (package pod), and, seeing
// the mark, does not register its Node again once it is deleted (package node).
// `vkubelet remove-node` (internal/process/nodecmd) and the chart's pre-delete
// hook call it.
package noderemove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/clockwait"
	"github.com/vkubelet/vkubelet/node"
)

// Config is what a removal needs. Zero PollInterval, Clock and Logger take the
// defaults documented on each field.
type Config struct {
	// Client needs, on the nodes removed: get, patch and delete of the Node,
	// delete of the Lease in kube-node-lease; on pods: list (the pods bound to
	// the node, by field selector) and create of pods/eviction.
	Client kubernetes.Interface
	// PollInterval is how often the pods still bound are listed again, refused
	// evictions asked again and failed requests retried (default 1s, as
	// kubectl drain polls), each wait up to 20% longer at random, so that the
	// nodes removed side by side (RemoveAll) do not all ask at once.
	PollInterval time.Duration
	// Clock stamps the removal mark and times the polls (default: the real
	// clock).
	Clock clock.WithTicker
	// Logger logs each step (default: slog's default logger).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// RemoveAll removes the nodes names side by side, until each is removed or ctx
// ends (its cause, with context.WithTimeoutCause, says why in the error). The
// error joins each node's.
func RemoveAll(ctx context.Context, cfg Config, names []string) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Remove(ctx, cfg, name)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Remove removes the node name: cordoned and marked, drained, deleted, its
// DaemonSet pods evicted, its Lease deleted. A node already gone is a success
// once its pods and Lease are gone too, so Remove may be run again after a
// failure. When ctx ends first, the error names the pods still bound and why;
// the Node is left cordoned (kubectl uncordon cancels the removal).
func Remove(ctx context.Context, cfg Config, name string) error {
	cfg = cfg.withDefaults()
	r := &remover{cfg: cfg, name: name, log: cfg.Logger.With("node", name)}
	if err := r.remove(ctx); err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	return nil
}

// remover is one node's removal.
type remover struct {
	cfg  Config
	name string
	log  *slog.Logger
}

func (r *remover) remove(ctx context.Context) error {
	gone, err := r.cordon(ctx)
	if err != nil {
		return err
	}
	if gone {
		r.log.Info("node not found: already deleted; evicting any pod still bound to it and deleting its lease")
	} else {
		if err := r.drain(ctx, nodeThere); err != nil {
			return err
		}
		if err := r.retry(ctx, "deleting the node", func() error {
			err := r.cfg.Client.CoreV1().Nodes().Delete(ctx, r.name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
		r.log.Info("node deleted")
	}
	if err := r.drain(ctx, nodeGone); err != nil {
		return err
	}
	if err := r.retry(ctx, "deleting the node's lease", func() error {
		err := r.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, r.name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	// A node process that does not know the mark (a vkubelet older than this
	// command) registers its Node again at once.
	var back *corev1.Node
	if err := r.retry(ctx, "checking the node stays deleted", func() error {
		n, err := r.cfg.Client.CoreV1().Nodes().Get(ctx, r.name, metav1.GetOptions{})
		back = nil
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		back = n
		return nil
	}); err != nil {
		return err
	}
	if back != nil {
		return fmt.Errorf("registered again (created %s) after its deletion: its process does not know the removal mark %s; stop the process, then run this again",
			back.CreationTimestamp.UTC().Format(time.RFC3339), node.RemovalAnnotation)
	}
	r.log.Info("node removed: no pod bound to it, no Node, no Lease")
	return nil
}

// cordon marks the Node unschedulable and for removal, in one patch; gone says
// there is no Node.
func (r *remover) cordon(ctx context.Context) (gone bool, err error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{
			node.RemovalAnnotation: r.cfg.Clock.Now().UTC().Format(time.RFC3339)}},
		"spec": map[string]any{"unschedulable": true},
	})
	if err != nil {
		return false, err
	}
	err = r.retry(ctx, "cordoning the node", func() error {
		_, err := r.cfg.Client.CoreV1().Nodes().Patch(ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			gone = true
			return nil
		}
		return err
	})
	if err == nil && !gone {
		r.log.Info("node cordoned and marked for removal", "annotation", node.RemovalAnnotation)
	}
	return gone, err
}

// stage is how far the removal is: it decides which pods are evicted.
type stage int

const (
	// nodeThere: the Node exists, so a DaemonSet's pod evicted now would be
	// put back on it by its controller (DaemonSet pods tolerate the cordon).
	nodeThere stage = iota
	// nodeGone: the Node is deleted; every pod left is evicted.
	nodeGone
)

// action is what the drain does with a pod bound to the node.
type action int

const (
	// evict: ask the Eviction API to delete the pod (with its own grace period).
	evict action = iota
	// await: the pod is terminating; wait for the node to confirm it stopped
	// and remove it.
	await
	// skip: a mirror pod, which stands in the API for a static pod of the
	// node's own: not the API's to remove (vkubelet makes none).
	skip
	// deferred: a DaemonSet's pod while the Node exists; evicted once it is
	// gone.
	deferred
)

// decide is what the drain does with p at stage s: kubectl drain's rules, with
// DaemonSet pods evicted last rather than left running in the provider.
func decide(p *corev1.Pod, s stage) action {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return skip
	}
	if p.DeletionTimestamp != nil {
		return await
	}
	if s == nodeThere && ownedByDaemonSet(p) {
		return deferred
	}
	return evict
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet" && strings.HasPrefix(ref.APIVersion, "apps/")
}

// drain evicts the pods bound to the node that decide says to at stage s, and
// waits until no pod but those it skips or defers is bound to the node: it lists
// them, and asks again for the evictions refused, every PollInterval.
func (r *remover) drain(ctx context.Context, s stage) error {
	// refused holds, for each pod whose eviction was refused, why; evicted the
	// pods whose eviction was accepted.
	refused, evicted := map[types.UID]string{}, map[types.UID]bool{}
	waiting := -1
	var left []corev1.Pod
	err := clockwait.Until(ctx, r.cfg.Clock, r.poll(), func(context.Context) (bool, error) {
		var skipped, deferredPods int
		err := r.retry(ctx, "listing the node's pods", func() error {
			pods, err := r.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.name).String()})
			if err != nil {
				return err
			}
			left, skipped, deferredPods = nil, 0, 0
			for _, p := range pods.Items {
				switch decide(&p, s) {
				case skip:
					skipped++
				case deferred:
					deferredPods++
				default:
					left = append(left, p)
				}
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		for i := range left {
			p := &left[i]
			if decide(p, s) != evict {
				continue
			}
			if err := r.evict(ctx, p, refused, evicted); err != nil {
				return false, err
			}
		}
		if len(left) == 0 {
			if skipped > 0 {
				r.log.Info("mirror pods left to the node", "pods", skipped)
			}
			if deferredPods > 0 {
				r.log.Info("DaemonSet pods left until the node is deleted", "pods", deferredPods)
			}
			return true, nil
		}
		if len(left) != waiting {
			waiting = len(left)
			r.log.Info("waiting for the node to stop its pods in the provider and remove them", "pods", waiting)
		}
		return false, nil
	})
	// ctx ended while waiting, or in a step (a list or an eviction in flight
	// when the time ran out): what the last list found says more than the cut
	// request. Before any list there is nothing to name.
	if err != nil && ctx.Err() != nil && waiting >= 0 {
		return stuck(context.Cause(ctx), left, refused, evicted)
	}
	return err
}

// evict asks the Eviction API to delete p, recording in evicted that it did
// or in refused why it would not; an error is one that asking again will not
// cure.
func (r *remover) evict(ctx context.Context, p *corev1.Pod, refused map[types.UID]string, evicted map[types.UID]bool) error {
	err := r.cfg.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case ctx.Err() != nil:
		// Out of time: the drain says so, with the earlier refusals.
	case err == nil:
		delete(refused, p.UID)
		evicted[p.UID] = true
		r.log.Info("pod evicted", "pod", p.Namespace+"/"+p.Name)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or replaced by another pod of that name.
	case fatal(err):
		return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
	default:
		// 429: a PodDisruptionBudget allows no disruption now; 500: the pod
		// has several budgets. Others: the API server's trouble, or the
		// client's (its rate limiter near the deadline), which does not hide
		// what the API server last answered.
		why := refusal(err)
		var answer apierrors.APIStatus
		if !errors.As(err, &answer) && refused[p.UID] != "" {
			r.log.Warn("asking for an eviction failed; asking again", "pod", p.Namespace+"/"+p.Name, "err", err)
			return nil
		}
		if refused[p.UID] != why {
			r.log.Warn("eviction refused; asking again", "pod", p.Namespace+"/"+p.Name, "reason", why)
		}
		refused[p.UID] = why
	}
	return nil
}

// refusal is why the Eviction API refused: its message, and the causes a
// budget's refusal carries (which budget, how many pods it needs healthy).
func refusal(err error) string {
	why := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Message != "" {
				why += " " + c.Message
			}
		}
	}
	return why
}

// stuck is the error of a drain that ran out of time, naming the pods left.
func stuck(cause error, left []corev1.Pod, refused map[types.UID]string, evicted map[types.UID]bool) error {
	var each []string
	for _, p := range left {
		why := "terminating: the node has not yet confirmed that the provider stopped it"
		if r, ok := refused[p.UID]; ok {
			why = "eviction refused: " + r
		} else if p.DeletionTimestamp == nil && !evicted[p.UID] {
			why = "not evicted: the time was up before the eviction was answered"
		}
		each = append(each, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, why))
	}
	sort.Strings(each)
	pods := "pods"
	if len(left) == 1 {
		pods = "pod"
	}
	return fmt.Errorf("%w with %d %s still bound to the node: %s; the node is left cordoned and its Node in place (kubectl uncordon cancels the removal)",
		cause, len(left), pods, strings.Join(each, ", "))
}

// retry calls fn until it succeeds, fails in a way retrying will not cure, or
// ctx ends, every PollInterval; what names the step in the error.
func (r *remover) retry(ctx context.Context, what string, fn func() error) error {
	var last error
	err := clockwait.Until(ctx, r.cfg.Clock, r.poll(), func(context.Context) (bool, error) {
		err := fn()
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			return false, fmt.Errorf("%s: %w (last error: %w)", what, context.Cause(ctx), err)
		case fatal(err):
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if last == nil || last.Error() != err.Error() {
			r.log.Warn(what+" failed; retrying", "err", err)
		}
		last = err
		return false, nil
	})
	if err != nil && err == ctx.Err() { // ctx ended while waiting, after a failure
		return fmt.Errorf("%s: %w (last error: %w)", what, context.Cause(ctx), last)
	}
	return err
}

// poll paces retry and drain: every PollInterval on the clock, jittered.
func (r *remover) poll() wait.Backoff { return wait.Backoff{Duration: r.cfg.PollInterval, Jitter: 0.2} }

// fatal reports whether err is one that asking again will not cure: the
// credential lacks a right, or the request is wrong.
func fatal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}
