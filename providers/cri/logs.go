package cri

import (
	"context"
	"io"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	"github.com/vkubelet/vkubelet/providers/providerutil/crilog"
)

// GetContainerLogs reads the container's CRI log file (the previous instance's with
// Previous) and applies every option as the kubelet does.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	p.mu.Lock()
	rec, ok := p.pods[providerutil.PodKey(namespace, name)]
	if !ok {
		p.mu.Unlock()
		return nil, providerutil.PodNotFound("cri", namespace, name)
	}
	ids, started := rec.ctrIDs[container]
	known := false
	for _, c := range allContainers(rec.pod) {
		known = known || c.Name == container
	}
	p.mu.Unlock()
	if !known {
		return nil, errdefs.NotFound("cri: container %s/%s/%s not found", namespace, name, container)
	}
	if !started {
		return nil, errdefs.InvalidInput("cri: container %s/%s/%s is waiting to start", namespace, name, container)
	}
	id := ids[0]
	if opts.Previous {
		id = ids[1]
		if id == "" {
			return nil, errdefs.InvalidInput("cri: previous terminated container %s/%s/%s not found", namespace, name, container)
		}
	}
	st, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, errContext(providerutil.PodKey(namespace, name), err)
	}
	follow := opts.Follow && !opts.Previous && st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	running := func(ctx context.Context) bool {
		st, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	r, err := crilog.Open(ctx, st.Status.LogPath, opts, follow, running)
	if err != nil {
		return nil, errContext(providerutil.PodKey(namespace, name), err)
	}
	return r, nil
}
