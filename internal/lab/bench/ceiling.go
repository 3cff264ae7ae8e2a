package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ceiling is what a plain client reaches doing a node's minimum per pod.
type ceiling struct {
	podsPerS, deletePodsPerS float64
	// writesPerPod are the client's writes per pod start, the create aside.
	writesPerPod float64
}

// measureCeiling does, with a plain client and pods of the configured shape, what
// a node must at least do per pod start — the scheduler's bound create aside: a
// TokenRequest for each token the pod mounts (bound to the pod, as the kubelet
// asks: the API server's default audience, 3607 s), then one status write; and per
// pod stop — the user's graceful delete aside — the final delete. It returns pods
// per second for both. Completion is observed the way the nodes' is: by the same
// kind of observer, watching for Running and for the pod gone, so all figures
// include the cost of the measuring watch. The status written is the one a
// kubelet writes for a started one-container pod (conditions, container status,
// addresses, start time), not a token one, so the API server does comparable work
// per write. The ceiling is what the API server can do, so it is measured flat
// out, whatever rate is offered to the nodes.
func measureCeiling(ctx context.Context, c kubernetes.Interface, cfg Config, caPEM []byte) (ceiling, error) {
	cfg.Rate = 0
	ns := namespaceName("ceiling")
	tmpl, err := prepareNamespace(ctx, c, ns, cfg.Shape, caPEM)
	if err != nil {
		return ceiling{}, err
	}
	defer c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	obs := observe(c, ns)
	defer close(obs.stop)

	// Pipelined like a node: creators hand each created pod to a pool of workers,
	// as the scheduler's binds reach a kubelet's workers, so the API server has
	// creates, TokenRequests and status writes in flight at once.
	var writes atomic.Int64
	var uidsMu sync.Mutex
	uids := make(map[string]types.UID, cfg.Pods)
	created := make(chan *corev1.Pod, cfg.Pods)
	startErr := pipeline(cfg.Concurrency, created, func(p *corev1.Pod) error {
		for _, tok := range tokenSources(p) {
			if _, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, p.Spec.ServiceAccountName, tokenRequest(p, tok), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("TokenRequest for pod %s/%s: %w", ns, p.Name, err)
			}
			writes.Add(1)
		}
		patch, err := runningStatusPatch(p, time.Now())
		if err == nil {
			_, err = c.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		}
		writes.Add(1)
		return err
	})
	asked, err := timed(ctx, cfg, tmpl, func(name string) error {
		p, err := c.CoreV1().Pods(ns).Create(ctx, tmpl.pod(name, "bench-ceiling"), metav1.CreateOptions{})
		if err == nil {
			err = tmpl.check(p)
		}
		if err != nil {
			return err
		}
		uidsMu.Lock()
		uids[name] = p.UID
		uidsMu.Unlock()
		created <- p
		return nil
	})
	close(created)
	if werr := startErr(); err == nil {
		err = werr
	}
	if err != nil {
		return ceiling{}, err
	}
	if err := obs.waitRunning(ctx, cfg.Pods, podTimeout(cfg.Pods)); err != nil {
		return ceiling{}, err
	}
	_, span := obs.latencies(asked, obs.running)
	out := ceiling{podsPerS: float64(cfg.Pods) / span.Seconds(), writesPerPod: float64(writes.Load()) / float64(cfg.Pods)}

	// Deletion: the user's graceful delete, then the node's final one, with the
	// pod's UID as precondition, as the kubelet does once the containers are gone.
	deleting := make(chan string, cfg.Pods)
	stopErr := pipeline(cfg.Concurrency, deleting, func(name string) error {
		return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To(uids[name])}})
	})
	dasked, err := timed(ctx, cfg, tmpl, func(name string) error {
		err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil {
			deleting <- name
		}
		return err
	})
	close(deleting)
	if werr := stopErr(); err == nil {
		err = werr
	}
	if err != nil {
		return ceiling{}, err
	}
	if err := obs.waitGone(ctx, cfg.Pods, podTimeout(cfg.Pods)); err != nil {
		return ceiling{}, err
	}
	_, dspan := obs.latencies(dasked, obs.gone)
	out.deletePodsPerS = float64(cfg.Pods) / dspan.Seconds()
	return out, nil
}

// pipeline starts n workers calling fn on what arrives on in, and returns a
// function that waits for them, once in is closed, with the first error.
func pipeline[T any](n int, in <-chan T, fn func(T) error) (wait func() error) {
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range in {
				if err := fn(v); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	return func() error {
		wg.Wait()
		select {
		case err := <-errc:
			return err
		default:
			return nil
		}
	}
}

// tokenRequest is the TokenRequest the kubelet makes for a token projection of
// pod p: bound to the pod, for the projection's audience (none: the API
// server's default) and lifetime.
func tokenRequest(p *corev1.Pod, tok *corev1.ServiceAccountTokenProjection) *authenticationv1.TokenRequest {
	var auds []string
	if tok.Audience != "" {
		auds = []string{tok.Audience}
	}
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         auds,
		ExpirationSeconds: tok.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID},
	}}
}

// runningStatusPatch is the status write that takes a just-created pod to Running
// as a kubelet would report it: the four standard conditions, one running
// container per spec container, host and pod addresses, start time.
func runningStatusPatch(p *corev1.Pod, now time.Time) ([]byte, error) {
	t := metav1.NewTime(now.Truncate(time.Second))
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "10.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "10.0.0.1"}},
		PodIP:     "10.0.0.2",
		PodIPs:    []corev1.PodIP{{IP: "10.0.0.2"}},
		StartTime: &t,
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	for _, ctr := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true, Started: ptr.To(true),
			ContainerID: "bench://" + string(p.UID) + "/" + ctr.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": st})
}
