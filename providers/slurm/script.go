package slurm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// The job's directory, as the script and the provider both know it:
//
//	job.sh                the batch script (0700: it holds the environment, Secrets included)
//	slurm.out             the job's own output: podman's complaints, not the containers'
//	volumes/<volume>/…    ConfigMap, Secret, projected and emptyDir volumes
//	stopping              present once the pod is being deleted: nothing restarts
//	c/<container>/<n>/    the container's n-th instance (n = its restart count):
//	    waiting           why it is not running yet: a reason on the first line, a message after
//	    started           when it started (RFC 3339)
//	    exit              "<exit code> <finished at> [reason]" once it has ended
//	    message           what podman said when the container could not start
//	    log               its output in the CRI log format (podman's k8s-file driver)
const (
	scriptFile   = "job.sh"
	jobOutFile   = "slurm.out"
	volumesDir   = "volumes"
	stoppingFile = "stopping"
	containerDir = "c"
)

// podDir is the pod's directory under the job root: namespace, name and UID, so a
// pod re-created under the same name gets a new one.
func podDir(root string, pod *corev1.Pod) string {
	return filepath.Join(root, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

// containerName is the podman container of a pod's container: unique per pod UID.
func containerName(pod *corev1.Pod, container string) string {
	return "vk-" + string(pod.UID) + "-" + container
}

// quote makes s one word of a POSIX shell command, whatever it holds.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quote(w)
	}
	return strings.Join(q, " ")
}

// slurmGrace bounds the grace period of containers that Slurm stops.
const slurmGrace = 10

// scriptOptions are the parts of the script that come from the provider's
// configuration rather than from the pod.
type scriptOptions struct {
	dir      string   // the pod's directory
	podman   []string // the podman command with its global options
	insecure []string // registries pulled from without TLS verification
	// createFlags are the provider's own options for every podman create.
	createFlags []string
}

// jobScript writes the batch script that runs the pod: each init container in
// turn, then the app containers side by side, with the kubelet's restart policy
// and back-off applied to each container inside the job. SIGTERM (a deletion)
// stops the containers with the pod's grace period; the job's exit code is 0 only
// when every app container ended with 0.
func jobScript(rp *provider.ResolvedPod, opts scriptOptions) (string, error) {
	pod := rp.Pod
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	w("#!/bin/sh\n")
	w("# Pod %s/%s (%s) as a Slurm job, written by vkubelet's slurm provider.\n", pod.Namespace, pod.Name, pod.UID)
	w("D=%s\n", quote(opts.dir))
	// A SIGTERM from Slurm itself (time limit, preemption, an operator's scancel)
	// is followed by SIGKILL after the cluster's KillWait (30 s by default): the
	// containers get a grace period within it. A deletion writes its own grace
	// period in the stopping file first.
	w("slurmgrace=%d\n", min(grace, slurmGrace))
	w("podman() { command %s \"$@\"; }\n", quoteAll(opts.podman))
	w("%s", scriptFunctions)
	var ctrs []string
	for _, c := range containers(pod) {
		ctrs = append(ctrs, containerName(pod, c.Name))
	}
	w("ctrs=%s\n", quote(strings.Join(ctrs, " ")))
	w("trap stop TERM INT\ntrap cleanup EXIT\n")
	// A requeued job starts afresh; the last run's containers are kept aside.
	w("rm -rf \"$D/c.prev\"; [ -d \"$D/c\" ] && mv \"$D/c\" \"$D/c.prev\"; mkdir -p \"$D/c\"\n")
	// run's arguments: name, restart policy, podman container, image, pull
	// policy, TLS option, then podman create's arguments.
	runLine := func(c corev1.Container, policy string) error {
		args, err := createArgs(rp, c, opts)
		if err != nil {
			return err
		}
		w("run %s %s %s %s %s %s %s &\n", quote(c.Name), policy, quote(containerName(pod, c.Name)), quote(c.Image),
			pullPolicy(c), quote(tlsVerify(c.Image, opts.insecure)), quoteAll(args))
		return nil
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return "", fmt.Errorf("init container %s: sidecar containers (restartPolicy Always) are not supported by the slurm provider", c.Name)
		}
		// The kubelet retries a failed init container unless the pod's policy is Never.
		policy := "onfailure"
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			policy = "never"
		}
		if err := runLine(c, policy); err != nil {
			return "", err
		}
		w("waitfor $! || exit 1\nstopping && exit 1\n")
	}
	policy := map[corev1.RestartPolicy]string{corev1.RestartPolicyNever: "never", corev1.RestartPolicyOnFailure: "onfailure"}[pod.Spec.RestartPolicy]
	if policy == "" {
		policy = "always"
	}
	w("pids=\n")
	for _, c := range pod.Spec.Containers {
		if err := runLine(c, policy); err != nil {
			return "", err
		}
		w("pids=\"$pids $!\"\n")
	}
	w("rc=0\nfor p in $pids; do waitfor $p || rc=1; done\nexit $rc\n")
	return b.String(), nil
}

// pullPolicy is the container's image pull policy as the script's run takes it.
func pullPolicy(c corev1.Container) string {
	switch c.ImagePullPolicy {
	case corev1.PullAlways:
		return "always"
	case corev1.PullNever:
		return "never"
	case corev1.PullIfNotPresent:
		return "missing"
	}
	// The API server's default: Always for :latest or no tag, IfNotPresent otherwise.
	ref := c.Image
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return "missing"
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") && ref[i+1:] != "latest" {
		return "missing"
	}
	return "always"
}

// tlsVerify is podman's --tls-verify option for the image's registry: false for
// the configured insecure registries, none (registries.conf decides, mirrors
// included) for the others.
func tlsVerify(image string, insecure []string) string {
	host, _, _ := strings.Cut(image, "/")
	if strings.ContainsAny(host, ".:") || host == "localhost" {
		for _, r := range insecure {
			if r == host {
				return "--tls-verify=false"
			}
		}
	}
	return ""
}

// createArgs are the arguments of `podman create` after the container's name:
// what the kubelet would give the runtime for this container.
func createArgs(rp *provider.ResolvedPod, c corev1.Container, opts scriptOptions) ([]string, error) {
	pod := rp.Pod
	args := append([]string{"--network=host", "--hostname=" + pod.Name}, opts.createFlags...)
	if c.WorkingDir != "" {
		args = append(args, "--workdir="+c.WorkingDir)
	}
	if user := runAsUser(pod, c); user != "" {
		args = append(args, "--user="+user)
	}
	if c.Stdin {
		args = append(args, "--interactive")
	}
	if c.TTY {
		args = append(args, "--tty")
	}
	env := rp.Env[c.Name]
	for _, e := range env {
		args = append(args, "--env="+e.Name+"="+e.Value)
	}
	mounts, err := volumeMounts(pod, c, opts.dir)
	if err != nil {
		return nil, err
	}
	args = append(args, mounts...)
	if len(c.Command) > 0 {
		var ep bytes.Buffer
		enc := json.NewEncoder(&ep)
		enc.SetEscapeHTML(false) // podman reads it as JSON: "<" needs no escape
		_ = enc.Encode(providerutil.ExpandCommand(c.Command, env))
		args = append(args, "--entrypoint="+strings.TrimSpace(ep.String()))
	}
	args = append(args, c.Image)
	return append(args, providerutil.ExpandCommand(c.Args, env)...), nil
}

// runAsUser is podman's --user for the container's security context ("" when the
// image's user applies).
func runAsUser(pod *corev1.Pod, c corev1.Container) string {
	var uid, gid *int64
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid = psc.RunAsUser, psc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	if uid == nil {
		return ""
	}
	if gid == nil {
		return strconv.FormatInt(*uid, 10)
	}
	return strconv.FormatInt(*uid, 10) + ":" + strconv.FormatInt(*gid, 10)
}

// volumeMounts are the container's --volume options: the pod's volumes live in
// its directory, except hostPath volumes, which are the compute node's paths.
func volumeMounts(pod *corev1.Pod, c corev1.Container, dir string) ([]string, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	var out []string
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s mounts volume %q, which the pod does not declare", c.Name, m.Name)
		}
		var src string
		readOnly := m.ReadOnly
		switch {
		case v.HostPath != nil:
			src = v.HostPath.Path
		case v.EmptyDir != nil:
			src = filepath.Join(dir, volumesDir, v.Name)
		case v.ConfigMap != nil, v.Secret != nil, v.Projected != nil, v.DownwardAPI != nil:
			src = filepath.Join(dir, volumesDir, v.Name)
			readOnly = true // as the kubelet mounts them
		default:
			return nil, fmt.Errorf("volume %s: only emptyDir, hostPath, configMap, secret, projected and downwardAPI volumes are supported by the slurm provider", v.Name)
		}
		if m.SubPath != "" {
			if filepath.IsAbs(m.SubPath) || strings.HasPrefix(filepath.Clean(m.SubPath), "..") {
				return nil, fmt.Errorf("container %s: volume mount %s: subPath %q must be relative, within the volume", c.Name, m.Name, m.SubPath)
			}
			src = filepath.Join(src, m.SubPath)
		}
		opt := "--volume=" + src + ":" + m.MountPath
		if readOnly {
			opt += ":ro"
		}
		out = append(out, opt)
	}
	return out, nil
}

// scriptFunctions are the shell functions every job script uses. The GPUs
// Slurm gave the job (CUDA_VISIBLE_DEVICES) are passed on to every container, as
// NVIDIA's device plugin does on a kubelet; the pod's own env comes after and wins. run executes one
// container, restarting it as its policy says with the kubelet's back-off (10 s,
// doubled, at most 5 min), and records each instance's progress in its directory.
// It survives a SIGTERM that Slurm sends every process of the job (its trap
// only records it) so that it can still write how the container ended once stop
// has stopped it; its children get the default disposition back. A deletion
// signals only the script (cli.stop), so that a podman command in flight
// finishes rather than leave a container it was starting running unknown to
// podman: stop stops the containers with the grace period of the stopping file
// (0 once the provider says that period is over), and run stops a container
// whose start ends after the stop began.
const scriptFunctions = `
stamp() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
put() { cat > "$1.tmp" && mv "$1.tmp" "$1"; }
stopping() { [ -e "$D/stopping" ]; }
nap() { s=$1; while [ "$s" -gt 0 ] && ! stopping; do sleep 1; s=$((s-1)); done; }
gpus() { [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && echo "--env=CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES --env=NVIDIA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; }
auth() { [ -e "$D/auth.json" ] && echo "--authfile=$D/auth.json"; }
pull() {
	case $2 in
	never) podman image exists "$1" || { echo "image $1 is not present with pull policy Never"; return 1; } ;;
	missing) podman image exists "$1" || podman pull -q $(auth) $3 "$1" >/dev/null ;;
	*) podman pull -q $(auth) $3 "$1" >/dev/null ;;
	esac
}
waitctr() {
	trap : TERM INT
	while podman container exists "$1"; do
		c=$(podman wait "$1" 2>/dev/null) && [ -n "$c" ] && { echo "$c"; return; }
		sleep 1
	done
	echo 137
}
run() {
	trap : TERM INT
	name=$1 policy=$2 ctr=$3 image=$4 pullpolicy=$5 tls=$6
	shift 6
	n=0 delay=10
	while :; do
		i="$D/c/$name/$n"
		mkdir -p "$i"
		[ -e "$i/waiting" ] || echo ContainerCreating | put "$i/waiting"
		pd=10
		until out=$(pull "$image" "$pullpolicy" "$tls" 2>&1); do
			stopping && return 1
			reason=ErrImagePull
			[ "$pullpolicy" = never ] && reason=ErrImageNeverPull
			printf '%s\n%s\n' "$reason" "$out" | put "$i/waiting"
			nap $pd
			pd=$((pd * 2)); [ $pd -gt 300 ] && pd=300
		done
		podman rm -f "$ctr" >/dev/null 2>&1
		if ! out=$(podman create --name "$ctr" --log-driver=k8s-file --log-opt=path="$i/log" $(gpus) "$@" 2>&1); then
			printf 'CreateContainerError\n%s\n' "$out" | put "$i/waiting"
			nap $delay
			stopping && return 1
			continue
		fi
		stopping && return 1
		stamp | put "$i/started"
		if out=$(podman start "$ctr" 2>&1 >/dev/null); then
			# Stopped while it started: the stop may have come too early for it.
			stopping && stopctr "$ctr"
			code=
			while [ -z "$code" ]; do code=$(waitctr "$ctr"); done
			echo "$code $(stamp)" | put "$i/exit"
		else
			code=128
			echo "$out" | put "$i/message"
			echo "$code $(stamp) StartError" | put "$i/exit"
		fi
		rm -f "$i/waiting"
		[ "$code" = 0 ] && [ "$policy" != always ] && return 0
		[ "$policy" = never ] || stopping && return 1
		n=$((n + 1))
		mkdir -p "$D/c/$name/$n"
		printf 'CrashLoopBackOff\nback-off %ss restarting failed container=%s\n' "$delay" "$name" | put "$D/c/$name/$n/waiting"
		nap $delay
		delay=$((delay * 2)); [ $delay -gt 300 ] && delay=300
	done
}
waitfor() {
	while :; do
		wait "$1"; _status=$?
		kill -0 "$1" 2>/dev/null || return $_status
	done
}
stopctr() {
	if [ -s "$D/stopping" ]; then t=$(cat "$D/stopping"); else t=$slurmgrace; fi
	podman stop --time "$t" "$1" >/dev/null 2>&1 &
}
stop() {
	[ -e "$D/stopping" ] || touch "$D/stopping"
	for c in $ctrs; do stopctr "$c"; done
}
cleanup() { for c in $ctrs; do podman rm -f "$c" >/dev/null 2>&1; done; }
`
