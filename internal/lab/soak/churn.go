package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
)

// Ops counts one kind of churn operation.
type Ops struct {
	OK int `json:"ok"`
	// Raced are operations on a pod deleted meanwhile (by the churn itself):
	// the pod was gone, which is no fault of the node.
	Raced int `json:"raced"`
	// Failed are the others, with the first few errors in Errors.
	Failed int      `json:"failed"`
	Errors []string `json:"errors,omitempty"`
}

// keptErrors is how many errors of each kind are kept for the report.
const keptErrors = 5

// churn drives the operations users make on a node's pods: deletes (the
// ReplicaSet creates their replacements), label updates, exec sessions and
// followed log streams, each at its rate, on Running pods picked at random.
type churn struct {
	client kubernetes.Interface
	rest   *rest.Config
	pods   cache.Store // the soak's pods, from an informer
	// logFollow is how long a followed log stream stays open.
	logFollow time.Duration

	mu  sync.Mutex
	ops map[string]*Ops
}

// op is one kind of operation on a pod.
type op struct {
	name string
	rate float64
	// parallel bounds the operations of the kind in flight.
	parallel int
	do       func(ctx context.Context, p *corev1.Pod) error
}

func (c *churn) kinds(deletes, updates, execs, logs float64) []op {
	return []op{
		{"delete", deletes, 8, c.delete},
		{"update", updates, 8, c.update},
		{"exec", execs, 8, c.exec},
		{"logs", logs, 16, c.followLogs},
	}
}

// run drives every kind of operation until ctx ends.
func (c *churn) run(ctx context.Context, kinds []op) {
	var wg sync.WaitGroup
	for _, k := range kinds {
		if k.rate <= 0 {
			continue
		}
		wg.Go(func() { c.drive(ctx, k) })
	}
	wg.Wait()
}

// drive runs one kind of operation at its rate, at most parallel at once,
// until ctx ends; it waits for those in flight.
func (c *churn) drive(ctx context.Context, k op) {
	limiter := rate.NewLimiter(rate.Limit(k.rate), 1)
	slots := make(chan struct{}, k.parallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	for limiter.Wait(ctx) == nil {
		p := c.pick()
		if p == nil {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			err := k.do(ctx, p)
			if ctx.Err() != nil {
				return // the soak is over; the operation was cut short
			}
			c.count(k.name, p, err)
		})
	}
}

// pick returns a Running pod, not being deleted, at random; nil if none.
func (c *churn) pick() *corev1.Pod {
	var running []*corev1.Pod
	for _, o := range c.pods.List() {
		p := o.(*corev1.Pod)
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return nil
	}
	return running[rand.IntN(len(running))]
}

// count records an operation's outcome on p.
func (c *churn) count(kind string, p *corev1.Pod, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.ops[kind]
	switch {
	case err == nil:
		o.OK++
	case c.gone(p.Namespace, p.Name, p.UID):
		o.Raced++
	default:
		o.Failed++
		if len(o.Errors) < keptErrors {
			o.Errors = append(o.Errors, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
		}
	}
}

// gone reports whether the pod uid is being deleted or no longer exists.
func (c *churn) gone(ns, name string, uid types.UID) bool {
	o, ok, err := c.pods.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return true
	}
	p := o.(*corev1.Pod)
	return p.UID != uid || p.DeletionTimestamp != nil
}

// results copies the counts.
func (c *churn) results() map[string]Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Ops, len(c.ops))
	for k, o := range c.ops {
		out[k] = *o
	}
	return out
}

func (c *churn) delete(ctx context.Context, p *corev1.Pod) error {
	return c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
}

// update changes a label of the pod, as a controller or `kubectl label` does:
// the node sees an update of a running pod that changes nothing it runs.
func (c *churn) update(ctx context.Context, p *corev1.Pod) error {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{"soak.vkubelet.io/touched":"%d"}}}`, p.UID, time.Now().UnixNano())
	_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// exec runs a command in the pod's container through the API server, over
// WebSocket as `kubectl exec` does by default, and checks what it printed.
func (c *churn) exec(ctx context.Context, p *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: []string{"echo", "soak"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	e, err := remotecommand.NewWebSocketExecutor(c.rest, http.MethodGet, req.URL().String())
	if err != nil {
		return err
	}
	var out strings.Builder
	if err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		return err
	}
	if !strings.Contains(out.String(), "soak") {
		return fmt.Errorf("exec printed %q, want it to echo soak", out.String())
	}
	return nil
}

// followLogs follows the container's log, as `kubectl logs -f` does, for
// logFollow, and checks that it read the log.
func (c *churn) followLogs(ctx context.Context, p *corev1.Pod) error {
	stream, err := c.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		return err
	}
	// Closing the stream at logFollow ends the read below: the node must then
	// let go of the stream too (a leak of followed streams shows as goroutines
	// and sockets).
	timer := time.AfterFunc(c.logFollow, func() { stream.Close() })
	defer timer.Stop()
	defer stream.Close()
	n, err := io.Copy(io.Discard, stream)
	if n == 0 {
		return fmt.Errorf("the log stream ended after nothing (%v)", err)
	}
	return nil
}
