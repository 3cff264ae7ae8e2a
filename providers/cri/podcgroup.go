package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The pod's own cgroup (cgroupParent), under which the runtime puts the
// sandbox and the containers, carries the limits of the pod as a whole, as the
// kubelet's pod cgroup does: CPU shares from the pod's requests, and a CPU
// quota and a memory limit when the pod's limits bound it, that is when the
// pod declares pod-level limits (spec.resources) or every container declares
// its own. Without them a pod with pod-level resources would run unbounded
// (its containers need no limits of their own), and a pod's containers
// together could take more than the pod was scheduled for.
//
// The runtime creates the cgroup with the sandbox; the provider writes the
// limits once the sandbox runs, before any container starts, and again at
// each resize.

// podCgroupLimits are the limits of a pod's cgroup.
type podCgroupLimits struct {
	shares uint64 // CPU shares (cgroup v1; v2's weight is derived from them)
	quota  int64  // CPU time in µs per quotaPeriod; -1: no CPU limit
	memory int64  // bytes; -1: no memory limit
}

// podCgroupLimitsOf are the limits the kubelet gives pod's cgroup: the pod's
// requests and limits as the scheduler counts them (pod-level ones if
// declared; else the containers', sidecars added to the app containers and
// init containers overlapping them), a limit applied only where every
// container, or the pod, declares one.
func podCgroupLimitsOf(pod *corev1.Pod) podCgroupLimits {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuBound, memBound := true, true
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Resources.Limits.Cpu().IsZero() {
				cpuBound = false
			}
			if list[i].Resources.Limits.Memory().IsZero() {
				memBound = false
			}
		}
	}
	if r := pod.Spec.Resources; r != nil {
		cpuBound = cpuBound || !r.Limits.Cpu().IsZero()
		memBound = memBound || !r.Limits.Memory().IsZero()
	}
	l := podCgroupLimits{shares: uint64(cpuShares(requests.Cpu().MilliValue())), quota: -1, memory: -1}
	if cpu := limits.Cpu().MilliValue(); cpuBound && cpu > 0 {
		l.quota = cpuQuota(cpu)
	}
	if mem := limits.Memory().Value(); memBound && mem > 0 {
		l.memory = mem
	}
	return l
}

// cpuShares are the CPU shares of milli thousandths of a CPU requested, as the
// kubelet computes them: 1024 a CPU, at least 2, at most 262144.
func cpuShares(milli int64) int64 {
	return min(max(milli*sharesPerCPU/1000, minShares), maxShares)
}

// cpuQuota is the CFS quota, in µs per quotaPeriod, of a limit of milli
// thousandths of a CPU: at least the kernel's minimum of 1 ms.
func cpuQuota(milli int64) int64 {
	return max(milli*quotaPeriod/1000, minQuotaUsecs)
}

// maxShares is the kernel's largest cpu.shares.
const maxShares = 262144

// cgroupFile is one value to write in a pod's cgroup: file, relative to the
// pod's directory in the hierarchy of controller (cgroup v1; "" on v2).
type cgroupFile struct {
	controller, file, value string
}

// files are the writes that give a pod's cgroup the limits l, on cgroup v2 if
// v2, else on v1's cpu and memory hierarchies.
func (l podCgroupLimits) files(v2 bool) []cgroupFile {
	if v2 {
		cpuMax, memMax := "max "+strconv.Itoa(quotaPeriod), "max"
		if l.quota >= 0 {
			cpuMax = fmt.Sprintf("%d %d", l.quota, quotaPeriod)
		}
		if l.memory >= 0 {
			memMax = strconv.FormatInt(l.memory, 10)
		}
		// cgroup v2's weight, 1 to 10000, from the shares as the runtimes map them.
		weight := 1 + ((l.shares-minShares)*9999)/(maxShares-minShares)
		return []cgroupFile{
			{"", "cpu.weight", strconv.FormatUint(weight, 10)},
			{"", "cpu.max", cpuMax},
			{"", "memory.max", memMax},
		}
	}
	return []cgroupFile{
		{"cpu", "cpu.shares", strconv.FormatUint(l.shares, 10)},
		{"cpu", "cpu.cfs_period_us", strconv.Itoa(quotaPeriod)},
		{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(l.quota, 10)},
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(l.memory, 10)},
	}
}

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// applyPodCgroup gives pod's cgroup under root the limits of pod's resources.
// A hierarchy where the runtime made no cgroup for the pod (a runtime with
// another cgroup driver, say) is left alone; every write that fails is
// reported, the others still made.
func applyPodCgroup(root string, pod *corev1.Pod) error {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	v2 := err == nil
	var errs []error
	for _, f := range podCgroupLimitsOf(pod).files(v2) {
		dir := filepath.Join(root, f.controller, cgroupParent(pod))
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f.file), []byte(f.value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("pod cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
