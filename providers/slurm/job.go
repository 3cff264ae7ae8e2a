package slurm

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pod annotations that choose where and how a pod's job runs. They override the
// provider's configuration.
const (
	AnnotationPrefix     = "slurm.vkubelet.io/"
	AnnotationPartition  = AnnotationPrefix + "partition"
	AnnotationAccount    = AnnotationPrefix + "account"
	AnnotationQOS        = AnnotationPrefix + "qos"
	AnnotationConstraint = AnnotationPrefix + "constraint"
	// AnnotationFlags holds further sbatch options, separated by spaces, each
	// written --name or --name=value (values cannot hold spaces).
	AnnotationFlags = AnnotationPrefix + "sbatch-flags"
)

// GPUResource is the extended resource a pod asks GPUs with, sent as --gres=gpu:N.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// reservedFlags are the sbatch options the provider sets itself or that would
// take the job out of its hands: a pod may not give them.
var reservedFlags = map[string]bool{
	"job-name": true, "output": true, "error": true, "input": true, "chdir": true, "parsable": true,
	"wrap": true, "uid": true, "gid": true, "array": true, "test-only": true, "wait": true,
	"export-file": true, "get-user-env": true, "batch": true, "open-mode": true,
}

// checkSbatchFlag refuses an option that is not of the form --name[=value] or
// that the provider reserves.
func checkSbatchFlag(f string) error {
	name, ok := strings.CutPrefix(f, "--")
	name, _, _ = strings.Cut(name, "=")
	if !ok || name == "" || strings.ContainsAny(f, " \t\n") {
		return fmt.Errorf("sbatch option %q: write it as --name or --name=value", f)
	}
	if reservedFlags[name] {
		return fmt.Errorf("sbatch option --%s is set by the slurm provider and cannot be given", name)
	}
	return nil
}

// podResources is what a pod asks of Slurm: the kubelet's effective pod request,
// the larger of the app containers' sum and the largest init container, each
// container counted by its limit (its request when it has none).
type podResources struct {
	CPUs      int64 // whole CPUs, rounded up; 0: Slurm's default
	MemoryMiB int64 // rounded up; 0: Slurm's default
	GPUs      int64
}

func resourcesOf(pod *corev1.Pod) podResources {
	amount := func(c corev1.Container, name corev1.ResourceName) resource.Quantity {
		if q, ok := c.Resources.Limits[name]; ok {
			return q
		}
		return c.Resources.Requests[name]
	}
	effective := func(name corev1.ResourceName, scale func(resource.Quantity) int64) int64 {
		var sum int64
		for _, c := range pod.Spec.Containers {
			sum += scale(amount(c, name))
		}
		for _, c := range pod.Spec.InitContainers {
			sum = max(sum, scale(amount(c, name)))
		}
		return sum
	}
	cpus := func(q resource.Quantity) int64 { return (q.MilliValue() + 999) / 1000 }
	mib := func(q resource.Quantity) int64 { return (q.Value() + 1<<20 - 1) >> 20 }
	count := func(q resource.Quantity) int64 { return q.Value() }
	return podResources{CPUs: effective(corev1.ResourceCPU, cpus), MemoryMiB: effective(corev1.ResourceMemory, mib),
		GPUs: effective(GPUResource, count)}
}

// submitFlags are sbatch's options for the pod, its script in dir.
func submitFlags(pod *corev1.Pod, cfg Config, dir string) ([]string, error) {
	flags := []string{
		"--job-name=" + string(pod.UID),
		"--output=" + filepath.Join(dir, jobOutFile),
		"--chdir=" + dir,
		"--nodes=1", "--ntasks=1",
	}
	// A job that Slurm ends for a node failure or preemption goes back in the
	// queue unless the pod would never be restarted.
	if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		flags = append(flags, "--no-requeue")
	} else {
		flags = append(flags, "--requeue")
	}
	r := resourcesOf(pod)
	if r.CPUs > 0 {
		flags = append(flags, "--cpus-per-task="+strconv.FormatInt(r.CPUs, 10))
	}
	if r.MemoryMiB > 0 {
		flags = append(flags, "--mem="+strconv.FormatInt(r.MemoryMiB, 10)+"M")
	}
	if r.GPUs > 0 {
		flags = append(flags, "--gres=gpu:"+strconv.FormatInt(r.GPUs, 10))
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		// Slurm's limit is in whole minutes: at least one.
		flags = append(flags, "--time="+strconv.FormatInt(max((*d+59)/60, 1), 10))
	}
	setting := func(flag, annotation, def string) {
		v := def
		if a, ok := pod.Annotations[annotation]; ok {
			v = a
		}
		if v != "" {
			flags = append(flags, "--"+flag+"="+v)
		}
	}
	setting("partition", AnnotationPartition, cfg.Partition)
	setting("account", AnnotationAccount, cfg.Account)
	setting("qos", AnnotationQOS, cfg.QOS)
	setting("constraint", AnnotationConstraint, "")
	flags = append(flags, cfg.SbatchFlags...)
	for _, f := range strings.Fields(pod.Annotations[AnnotationFlags]) {
		if err := checkSbatchFlag(f); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", AnnotationFlags, err)
		}
		flags = append(flags, f)
	}
	return flags, nil
}
