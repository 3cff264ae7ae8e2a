package cri

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// runningContainerID returns the runtime ID of the current instance of the named
// container of the pod, or a NotFound error.
func (p *Provider) runningContainerID(namespace, name, container string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, ok := p.pods[providerutil.PodKey(namespace, name)]
	if !ok {
		return "", providerutil.PodNotFound("cri", namespace, name)
	}
	ids, ok := rec.ctrIDs[container]
	if !ok || ids[0] == "" {
		for _, c := range allContainers(rec.pod) {
			if c.Name == container {
				return "", errdefs.InvalidInput("cri: container %s/%s/%s has not started", namespace, name, container)
			}
		}
		return "", errdefs.NotFound("cri: container %s/%s/%s not found", namespace, name, container)
	}
	return ids[0], nil
}

// RunInContainer runs cmd in the container through the runtime's streaming server.
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach provider.AttachIO) error {
	id, err := p.runningContainerID(namespace, name, container)
	if err != nil {
		return err
	}
	resp, err := p.runtime.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Tty: attach.TTY(),
		Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil && !attach.TTY(),
	})
	if err != nil {
		return errContext(providerutil.PodKey(namespace, name), fmt.Errorf("exec in %s: %w", container, err))
	}
	return errContext(providerutil.PodKey(namespace, name), stream(ctx, resp.Url, attach))
}

// AttachToContainer attaches to the container's main process.
func (p *Provider) AttachToContainer(ctx context.Context, namespace, name, container string, attach provider.AttachIO) error {
	id, err := p.runningContainerID(namespace, name, container)
	if err != nil {
		return err
	}
	resp, err := p.runtime.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: id, Tty: attach.TTY(),
		Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil && !attach.TTY(),
	})
	if err != nil {
		return errContext(providerutil.PodKey(namespace, name), fmt.Errorf("attach to %s: %w", container, err))
	}
	return errContext(providerutil.PodKey(namespace, name), stream(ctx, resp.Url, attach))
}

// stream connects attach to a remotecommand streaming URL of the runtime.
func stream(ctx context.Context, rawURL string, attach provider.AttachIO) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		return err
	}
	return providerutil.ExecResult(executor.StreamWithContext(ctx, providerutil.StreamOptions(ctx, attach)))
}

// PortForward copies bytes between stream and port inside the pod's network
// namespace, through the runtime's port-forward streaming endpoint.
func (p *Provider) PortForward(ctx context.Context, namespace, name string, port int32, s io.ReadWriteCloser) error {
	key := providerutil.PodKey(namespace, name)
	p.mu.Lock()
	rec, ok := p.pods[key]
	var sandbox string
	if ok {
		sandbox = rec.sandboxID
	}
	p.mu.Unlock()
	if !ok {
		return providerutil.PodNotFound("cri", namespace, name)
	}
	if sandbox == "" {
		return errdefs.InvalidInput("cri: pod %s has no sandbox yet", key)
	}
	resp, err := p.runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sandbox, Port: []int32{port}})
	if err != nil {
		return errContext(key, fmt.Errorf("port-forward: %w", err))
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		return errContext(key, err)
	}
	conn, err := providerutil.DialPortForward(&rest.Config{}, u)
	if err != nil {
		return errContext(key, fmt.Errorf("port-forward: %w", err))
	}
	defer conn.Close()
	data, errCh, err := providerutil.PortForwardStreams(conn, port)
	if err != nil {
		return errContext(key, err)
	}

	var once sync.Once
	done := make(chan struct{})
	finish := func() { once.Do(func() { close(done) }) }
	go func() {
		_, _ = io.Copy(data, s)
		_ = data.Close() // half-close: the pod sees EOF
	}()
	go func() {
		_, _ = io.Copy(s, data)
		finish()
	}()
	defer func() { _ = data.Reset() }()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return nil
		case err := <-errCh:
			if err != nil {
				return errContext(key, err)
			}
			errCh = nil
		}
	}
}
