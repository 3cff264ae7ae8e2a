package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A resize that lowers a memory limit below the memory in use is not made, as
// on a kubelet: the kernel would have to reclaim or kill at once. The resize
// fails with an error saying so (the pod controller reports it in the pod's
// PodResizeInProgress condition, reason Error) and is tried again later, when
// the usage may have dropped; the pod goes on with the limits it has.

// memoryLimitDecrease returns an error when pod, resized from old, would get
// a memory limit below the memory in use: its own cgroup's (pod-level
// resources, or its containers' limits summed), or that of a container of
// changed, the containers resized in place, whose instance ids names. A usage
// that cannot be read lets the resize through: the kernel is the last judge.
func (p *Provider) memoryLimitDecrease(ctx context.Context, old, pod *corev1.Pod, changed []corev1.Container, ids map[string]string) error {
	var errs []error
	if limit, was := podCgroupLimitsOf(pod).memory, podCgroupLimitsOf(old).memory; lowered(was, limit) {
		if used, ok := podMemoryUsage(cgroupRoot, pod); ok && used >= limit {
			errs = append(errs, fmt.Errorf("the pod's memory limit (%d) below current usage (%d)", limit, used))
		}
	}
	for i := range changed {
		c := &changed[i]
		if ids[c.Name] == "" {
			continue
		}
		limit := resources(pod, c).MemoryLimitInBytes
		was := int64(0)
		if oc := specContainer(old, c.Name); oc != nil {
			was = resources(old, oc).MemoryLimitInBytes
		}
		if limit <= 0 || !lowered(nonZeroOrNone(was), limit) {
			continue
		}
		st, err := p.runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: ids[c.Name]})
		if err != nil || st.GetStats().GetMemory().GetUsageBytes() == nil {
			continue
		}
		if used := int64(st.GetStats().GetMemory().GetUsageBytes().GetValue()); used >= limit {
			errs = append(errs, fmt.Errorf("container %q memory limit (%d) below current usage (%d)", c.Name, limit, used))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cri: pod %s/%s: cannot lower memory limits: %w", pod.Namespace, pod.Name, errors.Join(errs...))
	}
	return nil
}

// lowered reports whether a memory limit goes from was to limit down, or is
// set where there was none (-1).
func lowered(was, limit int64) bool {
	return limit >= 0 && (was < 0 || limit < was)
}

// nonZeroOrNone is a runtime's memory limit as a cgroup limit: 0 is none.
func nonZeroOrNone(limit int64) int64 {
	if limit == 0 {
		return -1
	}
	return limit
}

// podMemoryUsage is the memory charged to pod's cgroup under root (cgroup v2's
// memory.current, v1's memory.usage_in_bytes); ok is false when it cannot be
// read.
func podMemoryUsage(root string, pod *corev1.Pod) (used int64, ok bool) {
	file := filepath.Join(root, cgroupParent(pod), "memory.current")
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		file = filepath.Join(root, "memory", cgroupParent(pod), "memory.usage_in_bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	used, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return used, err == nil
}
