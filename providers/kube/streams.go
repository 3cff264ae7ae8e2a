package kube

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// target returns the target pod of source pod ns/name from the informer.
func (p *Provider) target(ns, name string) (*corev1.Pod, error) {
	t := p.cached(ns, name)
	if t == nil {
		return nil, noTarget(providerutil.PodKey(ns, name))
	}
	return t, nil
}

// GetContainerLogs streams the target container's log through the target API server.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	t, err := p.target(namespace, pod)
	if err != nil {
		return nil, err
	}
	lo := &corev1.PodLogOptions{Container: container, Follow: opts.Follow, Previous: opts.Previous, Timestamps: opts.Timestamps}
	if opts.TailSet {
		lo.TailLines = ptrTo(int64(opts.Tail))
	}
	if opts.LimitBytes > 0 {
		lo.LimitBytes = ptrTo(opts.LimitBytes)
	}
	if opts.SinceSeconds > 0 {
		lo.SinceSeconds = ptrTo(opts.SinceSeconds)
	}
	if opts.SinceTime != nil {
		lo.SinceTime = &metav1.Time{Time: *opts.SinceTime}
	}
	rc, err := p.client.CoreV1().Pods(t.Namespace).GetLogs(t.Name, lo).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return nil, errdefs.AsNotFound(err)
	}
	if apierrors.IsBadRequest(err) {
		// A container the pod does not have, or options the target refuses:
		// the caller's mistake (400), not the provider's failure (500).
		return nil, errdefs.AsInvalidInput(fmt.Errorf("logs of %s/%s: %w", namespace, pod, err))
	}
	if err != nil {
		return nil, fmt.Errorf("logs of %s/%s: %w", namespace, pod, err)
	}
	return rc, nil
}

func ptrTo[T any](v T) *T { return &v }

// RunInContainer runs cmd in the target container (pods/exec).
func (p *Provider) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	return p.stream(ctx, namespace, pod, "exec", container, cmd, attach)
}

// AttachToContainer attaches to the target container (pods/attach).
func (p *Provider) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	return p.stream(ctx, namespace, pod, "attach", container, nil, attach)
}

func (p *Provider) stream(ctx context.Context, namespace, pod, sub, container string, cmd []string, attach provider.AttachIO) error {
	if p.restConfig == nil {
		return errdefs.NotImplemented("%s needs a target REST config", sub)
	}
	t, err := p.target(namespace, pod)
	if err != nil {
		return err
	}
	stdin, stdout, stderr := attach.Stdin(), attach.Stdout(), attach.Stderr()
	req := p.client.CoreV1().RESTClient().Post().Namespace(t.Namespace).Resource("pods").Name(t.Name).SubResource(sub)
	if sub == "exec" {
		req = req.VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil, TTY: attach.TTY()}, scheme.ParameterCodec)
	} else {
		req = req.VersionedParams(&corev1.PodAttachOptions{Container: container,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil, TTY: attach.TTY()}, scheme.ParameterCodec)
	}
	ws, err := remotecommand.NewWebSocketExecutor(p.restConfig, "GET", req.URL().String())
	if err != nil {
		return err
	}
	sp, err := remotecommand.NewSPDYExecutor(p.restConfig, "POST", req.URL())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	err = providerutil.ExecResult(exec.StreamWithContext(ctx, providerutil.StreamOptions(ctx, attach)))
	var exitErr *provider.ExecError
	if err != nil && !errors.As(err, &exitErr) {
		return fmt.Errorf("%s in %s/%s: %w", sub, namespace, pod, err)
	}
	return err
}

// PortForward connects stream to port of the target pod (pods/portforward, SPDY).
func (p *Provider) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	if p.restConfig == nil {
		return errdefs.NotImplemented("port-forward needs a target REST config")
	}
	t, err := p.target(namespace, pod)
	if err != nil {
		return err
	}
	u := p.client.CoreV1().RESTClient().Post().Namespace(t.Namespace).Resource("pods").Name(t.Name).SubResource("portforward").URL()
	conn, err := providerutil.DialPortForward(p.restConfig, u)
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s: %w", namespace, pod, err)
	}
	defer conn.Close()
	data, remoteErr, err := providerutil.PortForwardStreams(conn, port)
	if err != nil {
		return err
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(stream, data); done <- struct{}{} }()
	go func() { _, _ = io.Copy(data, stream); _ = data.Close(); done <- struct{}{} }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
	case err := <-remoteErr:
		if err != nil {
			return fmt.Errorf("%s/%s: %w", namespace, pod, err)
		}
	}
	return nil
}
