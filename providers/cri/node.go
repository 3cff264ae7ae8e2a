package cri

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
)

// Ping asks the runtime whether it is ready.
func (p *Provider) Ping(ctx context.Context) error {
	resp, err := p.runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return errdefs.Unavailable("cri: runtime %s: %v", p.cfg.RuntimeEndpoint, err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			return errdefs.Unavailable("cri: runtime %s not ready: %s: %s", p.cfg.RuntimeEndpoint, c.Reason, c.Message)
		}
	}
	return nil
}

// NotifyNodeStatus keeps the callback; the node's capacity does not change while
// the provider runs.
func (p *Provider) NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifyNode = notify
}

// ConfigureNode sets the node's capacity and allocatable from the host (CPUs,
// memory) and the configured pods limit, and its nodeInfo from the runtime. The
// node's InternalIP becomes the pods' hostIP unless one was configured.
func (p *Provider) ConfigureNode(ctx context.Context, node *corev1.Node) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourcePods: resource.MustParse(p.cfg.Pods),
	}
	if mem, err := memTotal(); err == nil {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(int64(mem), resource.BinarySI)
	}
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	for k, v := range capacity {
		node.Status.Capacity[k] = v.DeepCopy()
		node.Status.Allocatable[k] = v.DeepCopy()
	}
	node.Status.NodeInfo.OperatingSystem = runtime.GOOS
	node.Status.NodeInfo.Architecture = runtime.GOARCH
	if v, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		node.Status.NodeInfo.KernelVersion = strings.TrimSpace(string(v))
	}
	if v, err := p.runtime.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
		node.Status.NodeInfo.ContainerRuntimeVersion = v.RuntimeName + "://" + v.RuntimeVersion
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.HostIP == "" {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				p.hostIP = a.Address
				break
			}
		}
	}
	p.node = node.DeepCopy()
}

// meminfo reads the named fields of /proc/meminfo, in bytes.
func meminfo(fields ...string) (map[string]uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, n := range fields {
		want[n] = true
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !want[name] {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			continue
		}
		v, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fs) > 1 && fs[1] == "kB" {
			v *= 1024
		}
		out[name] = v
	}
	for _, n := range fields {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("/proc/meminfo: no %s", n)
		}
	}
	return out, sc.Err()
}

func memTotal() (uint64, error) {
	m, err := meminfo("MemTotal")
	if err != nil {
		return 0, err
	}
	return m["MemTotal"], nil
}
