package cri

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// The kubelet's CPU conversions (pkg/kubelet/cm): shares from requests, a CFS quota
// over a 100ms period from limits.
const (
	minShares     = 2
	sharesPerCPU  = 1024
	quotaPeriod   = 100000 // µs
	minQuotaUsecs = 1000
)

// annotationImage on a container is the image of the spec it was created from, so
// that a change of image by UpdatePod is noticed.
const annotationImage = "vkubelet.io/image"

// hostNetwork reports whether the pod runs in the host's network namespace.
func (p *Provider) hostNetwork(pod *corev1.Pod) bool {
	return pod.Spec.HostNetwork || p.cfg.Network == NetworkHost
}

func (p *Provider) podLogDir(pod *corev1.Pod) string {
	return filepath.Join(p.logsDir(), fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// cgroupParent is the pod's cgroup, under which the runtime puts its containers.
func cgroupParent(pod *corev1.Pod) string {
	return "/vkubelet/pod" + string(pod.UID)
}

// removePodCgroups removes the pod's cgroup directories, which the runtime leaves
// behind, in every hierarchy: deepest first, since a cgroup with children cannot be
// removed. The containers have stopped, so the cgroups are empty.
func (p *Provider) removePodCgroups(pod *corev1.Pod) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		dir := filepath.Join(root, cgroupParent(pod))
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				p.log.Debug("removing pod cgroup", "cgroup", dirs[i], "err", err)
			}
		}
	}
}

func (p *Provider) namespaceOptions(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	if p.hostNetwork(pod) {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	} else if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

func podLabels(nodeName string, pod *corev1.Pod) map[string]string {
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[labelNode] = nodeName
	labels[labelPodName] = pod.Name
	labels[labelPodNamespace] = pod.Namespace
	labels[labelPodUID] = string(pod.UID)
	return labels
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// sandboxConfig is the CRI sandbox of the pod, a function of the pod and the
// node's configuration, so that CreateContainer gets the same one as
// RunPodSandbox. warnings are what the kubelet would record as the pod's events.
func (p *Provider) sandboxConfig(pod *corev1.Pod) (cfg *runtimeapi.PodSandboxConfig, warnings []podWarning, err error) {
	cfg = &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)},
		LogDirectory: p.podLogDir(pod),
		Labels:       podLabels(p.nodeName, pod),
		Annotations:  map[string]string{},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent(pod),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: p.namespaceOptions(pod),
			},
		},
	}
	for k, v := range pod.Annotations {
		cfg.Annotations[k] = v
	}
	// runc cannot set the hostname of a container that shares the host's UTS
	// namespace, which host-network sandboxes do.
	if !p.hostNetwork(pod) {
		if cfg.Hostname, err = sandboxHostname(pod, p.cfg.ClusterDomain); err != nil {
			return nil, nil, err
		}
	}
	if cfg.DnsConfig, warnings, err = p.dnsConfig(pod); err != nil {
		return nil, nil, err
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		cfg.Linux.SecurityContext.RunAsUser = int64Value(sc.RunAsUser)
		cfg.Linux.SecurityContext.RunAsGroup = int64Value(sc.RunAsGroup)
		cfg.Linux.SecurityContext.SupplementalGroups = supplementalGroups(sc)
		if len(sc.Sysctls) > 0 {
			cfg.Linux.Sysctls = map[string]string{}
			for _, sysctl := range sc.Sysctls {
				cfg.Linux.Sysctls[dottedSysctl(sysctl.Name)] = sysctl.Value
			}
		}
	}
	for _, c := range allContainers(pod) {
		// A privileged container needs a privileged sandbox (the runtime refuses
		// it otherwise), ephemeral ones included, as with the kubelet; on a node
		// that allows none, none runs.
		if privileged(&c) && p.cfg.AllowPrivileged {
			cfg.Linux.SecurityContext.Privileged = true
		}
		for _, port := range c.Ports {
			if port.HostPort == 0 {
				continue
			}
			proto := runtimeapi.Protocol_TCP
			switch port.Protocol {
			case corev1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case corev1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol: proto, ContainerPort: port.ContainerPort, HostPort: port.HostPort, HostIp: port.HostIP,
			})
		}
	}
	return cfg, warnings, nil
}

// safeSysctls are the sysctls the kubelet lets any pod set: namespaced, and
// harmless to the node and its other pods. It allows no other by default, and
// neither does this provider.
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
	"net.ipv4.tcp_slow_start_after_idle":  true,
	"net.ipv4.tcp_notsent_lowat":          true,
}

// forbiddenSysctl is why the pod may not set one of its sysctls, in the
// kubelet's words, or nil: one not safe, or a network one in the node's network
// namespace, or an IPC one in the node's IPC namespace (they would be the
// node's).
func (p *Provider) forbiddenSysctl(pod *corev1.Pod) error {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := dottedSysctl(s.Name)
		switch {
		case !safeSysctls[name]:
			return fmt.Errorf("forbidden sysctl: %q not allowlisted", name)
		case strings.HasPrefix(name, "net.") && p.hostNetwork(pod):
			return fmt.Errorf("forbidden sysctl: %q not allowed with host net enabled", name)
		case strings.HasPrefix(name, "kernel.shm") && pod.Spec.HostIPC:
			return fmt.Errorf("forbidden sysctl: %q not allowed with host ipc enabled", name)
		}
	}
	return nil
}

// dottedSysctl is a sysctl's name with dots as separators, as the runtime
// wants it (runc judges by the dots whether a sysctl is namespaced): the API
// takes slashes too, as /proc/sys paths, where a dot is part of a name
// (net/ipv4/conf/eno2.100/rp_filter is net.ipv4.conf.eno2/100.rp_filter).
func dottedSysctl(name string) string {
	if i := strings.IndexAny(name, "./"); i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

func int64Value(v *int64) *runtimeapi.Int64Value {
	if v == nil {
		return nil
	}
	return &runtimeapi.Int64Value{Value: *v}
}

// containerConfig is the CRI container of c, the attempt-th instance, in a sandbox
// whose IP is podIP.
func (p *Provider) containerConfig(pod *corev1.Pod, c *corev1.Container, env []corev1.EnvVar, attempt uint32, podIP string) (*runtimeapi.ContainerConfig, error) {
	if privileged(c) && !p.cfg.AllowPrivileged {
		// Pods with such containers are refused (validate); an ephemeral container
		// added later is refused alone.
		return nil, fmt.Errorf("container %s is privileged, which this node does not allow", c.Name)
	}
	env = withPodIPs(c, env, p.envPodIPs(pod, podIP))
	mounts, err := p.mounts(pod, c, env)
	if err != nil {
		return nil, err
	}
	hosts, err := p.hostsMount(pod, c, podIP)
	if err != nil {
		return nil, err
	}
	if hosts != nil {
		mounts = append(mounts, hosts)
	}
	term, err := p.terminationMount(pod, c, attempt)
	if err != nil {
		return nil, err
	}
	if term != nil {
		mounts = append(mounts, term)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: attempt},
		Image:      &runtimeapi.ImageSpec{Image: c.Image},
		Command:    providerutil.ExpandCommand(c.Command, env),
		Args:       providerutil.ExpandCommand(c.Args, env),
		WorkingDir: c.WorkingDir,
		Mounts:     mounts,
		LogPath:    filepath.Join(c.Name, strconv.Itoa(int(attempt))+".log"),
		Stdin:      c.Stdin,
		StdinOnce:  c.StdinOnce,
		Tty:        c.TTY,
		Labels: map[string]string{
			labelNode:          p.nodeName,
			labelPodName:       pod.Name,
			labelPodNamespace:  pod.Namespace,
			labelPodUID:        string(pod.UID),
			labelContainerName: c.Name,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.restartCount": strconv.Itoa(int(attempt)),
			annotationImage:                        c.Image,
			annotationTerminationPath:              terminationMessagePath(c),
			annotationTerminationPolicy:            string(terminationMessagePolicy(c)),
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       resources(pod, c),
			SecurityContext: p.securityContext(pod, c),
		},
	}
	for _, e := range env {
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	return cfg, nil
}

// envPodIPs are the pod's IPs for its containers' environment (withPodIPs):
// the sandbox's IP, or the node's for a pod in the node's network namespace
// because of Config.Network. A hostNetwork pod's were resolved with the pod (the
// node's addresses, as the kubelet gives them): nil.
func (p *Provider) envPodIPs(pod *corev1.Pod, podIP string) []string {
	switch {
	case pod.Spec.HostNetwork:
		return nil
	case podIP == "" && p.hostNetwork(pod):
		podIP = p.hostIPNow()
	}
	if podIP == "" {
		return nil
	}
	return []string{podIP}
}

// resources converts the container's requests and limits as the kubelet does.
func resources(pod *corev1.Pod, c *corev1.Container) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{CpuShares: minShares}
	cpuReq, hasReq := c.Resources.Requests[corev1.ResourceCPU]
	cpuLim, hasLim := c.Resources.Limits[corev1.ResourceCPU]
	if !hasReq && hasLim {
		cpuReq, hasReq = cpuLim, true
	}
	mem, hasMem := c.Resources.Limits[corev1.ResourceMemory]
	// A container without a limit of its own in a pod with pod-level limits
	// runs under the pod's, as the kubelet has it: the container's own
	// cgroup says so to what reads it there (a JVM sizing its heap, say).
	if podRes := pod.Spec.Resources; podRes != nil {
		if l, ok := podRes.Limits[corev1.ResourceCPU]; ok && !hasLim {
			cpuLim, hasLim = l, true
		}
		if l, ok := podRes.Limits[corev1.ResourceMemory]; ok && !hasMem {
			mem, hasMem = l, true
		}
	}
	if hasReq {
		r.CpuShares = cpuShares(cpuReq.MilliValue())
	}
	if hasLim {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = cpuQuota(cpuLim.MilliValue())
	}
	if hasMem {
		r.MemoryLimitInBytes = mem.Value()
	}
	return r
}

// supplementalGroups are the groups a pod's processes belong to besides their
// own: the pod's supplementalGroups and, as the kubelet adds it, its fsGroup,
// which owns the pod's volumes (fsGroup below).
func supplementalGroups(psc *corev1.PodSecurityContext) []int64 {
	groups := slices.Clone(psc.SupplementalGroups)
	if g := psc.FSGroup; g != nil && !slices.Contains(groups, *g) {
		groups = append(groups, *g)
	}
	return groups
}

func (p *Provider) securityContext(pod *corev1.Pod, c *corev1.Container) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: p.namespaceOptions(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil {
		sc.RunAsUser = int64Value(psc.RunAsUser)
		sc.RunAsGroup = int64Value(psc.RunAsGroup)
		sc.SupplementalGroups = supplementalGroups(psc)
	}
	csc := c.SecurityContext
	if csc == nil {
		return sc
	}
	if csc.RunAsUser != nil {
		sc.RunAsUser = int64Value(csc.RunAsUser)
	}
	if csc.RunAsGroup != nil {
		sc.RunAsGroup = int64Value(csc.RunAsGroup)
	}
	sc.Privileged = privileged(c)
	sc.ReadonlyRootfs = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	if csc.AllowPrivilegeEscalation != nil {
		sc.NoNewPrivs = !*csc.AllowPrivilegeEscalation
	}
	if caps := csc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, c := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(c))
		}
		for _, c := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(c))
		}
	}
	return sc
}

// mounts are the bind mounts of c's volumeMounts.
func (p *Provider) mounts(pod *corev1.Pod, c *corev1.Container, env []corev1.EnvVar) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, fmt.Errorf("container %s: volumeMount %q names no volume of the pod", c.Name, vm.Name)
		}
		host, readOnly, err := p.volumeHostPath(pod, vol)
		if err != nil {
			return nil, err
		}
		subPath := vm.SubPath
		if vm.SubPathExpr != "" {
			// $(VAR) from the container's environment, as in its command: a
			// reference to a variable left empty can make it absolute, which
			// is refused below until the pod's update fills it in.
			subPath = providerutil.ExpandCommand([]string{vm.SubPathExpr}, env)[0]
		}
		if subPath != "" {
			if filepath.IsAbs(subPath) || slices.Contains(strings.Split(filepath.ToSlash(subPath), "/"), "..") {
				return nil, fmt.Errorf("container %s: volumeMount %q: subPath %q must be a relative path without '..'", c.Name, vm.Name, subPath)
			}
			root := host
			host = filepath.Join(host, subPath)
			if vol.EmptyDir != nil || vol.HostPath != nil {
				if err := makeSubPath(root, subPath); err != nil {
					return nil, fmt.Errorf("container %s: volumeMount %q: subPath %q: %w", c.Name, vm.Name, subPath, err)
				}
			}
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath: vm.MountPath,
			HostPath:      host,
			Readonly:      vm.ReadOnly || readOnly,
		})
	}
	return out, nil
}

// makeSubPath makes the directories of subPath missing under the volume's
// directory root with root's own mode (its permissions and its setgid and
// sticky bits, whatever the umask), as the kubelet makes them: an fsGroup or
// every user that may write in the volume may write in them too.
func makeSubPath(root, subPath string) error {
	info, err := os.Stat(root)
	if err != nil {
		return err
	}
	mode := info.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
	dir := root
	for _, part := range strings.Split(filepath.Clean(subPath), string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		if _, err := os.Lstat(dir); err == nil {
			continue
		} else if !os.IsNotExist(err) {
			return err
		}
		if err := os.Mkdir(dir, mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	return nil
}

// checkRunAsNonRoot refuses to run container c of the pod as root when its
// effective securityContext (the container's, else the pod's) says
// runAsNonRoot, as the kubelet does before it creates a container: the user is
// the securityContext's runAsUser or else the image's, which the runtime reports
// as a UID or a name. A name cannot be verified, and is refused too; an image
// that names no user runs as root.
func (p *Provider) checkRunAsNonRoot(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	nonRoot, user := effectiveUser(pod, c)
	if !nonRoot {
		return nil
	}
	if user != nil {
		return nonRootError(pod, c, user, "", true)
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	st, err := p.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: c.Image}})
	if err != nil {
		return fmt.Errorf("image %s: %w", c.Image, err)
	}
	img := st.GetImage()
	switch {
	case img.GetUid() != nil:
		uid := img.GetUid().GetValue()
		return nonRootError(pod, c, &uid, "", false)
	case img.GetUsername() != "":
		return nonRootError(pod, c, nil, img.GetUsername(), false)
	}
	return nonRootError(pod, c, new(int64), "", false)
}

// effectiveUser is whether c must run as a non-root user, and the user its
// securityContext sets (nil: the image's): the container's fields, else the
// pod's.
func effectiveUser(pod *corev1.Pod, c *corev1.Container) (nonRoot bool, user *int64) {
	if psc := pod.Spec.SecurityContext; psc != nil {
		nonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		user = psc.RunAsUser
	}
	if csc := c.SecurityContext; csc != nil {
		if csc.RunAsNonRoot != nil {
			nonRoot = *csc.RunAsNonRoot
		}
		if csc.RunAsUser != nil {
			user = csc.RunAsUser
		}
	}
	return nonRoot, user
}

// nonRootError is why container c, which must run as a non-root user, may not
// run as uid (or the image's user name), in the kubelet's words; nil if it may.
// fromSpec: uid is the securityContext's runAsUser, not the image's.
func nonRootError(pod *corev1.Pod, c *corev1.Container, uid *int64, username string, fromSpec bool) error {
	who := fmt.Sprintf("(pod: %q, container: %s)", podDesc(pod.Name, pod.Namespace, pod.UID), c.Name)
	switch {
	case fromSpec && *uid == 0:
		return fmt.Errorf("container's runAsUser breaks non-root policy %s", who)
	case fromSpec:
		return nil
	case uid == nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root %s", username, who)
	case *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root %s", who)
	case *uid < 0 || *uid > math.MaxInt32:
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d), not in 1-%d %s", *uid, math.MaxInt32, who)
	}
	return nil
}

// podDesc names a pod as the kubelet's messages do: name_namespace(uid).
func podDesc(name, namespace string, uid types.UID) string {
	return fmt.Sprintf("%s_%s(%s)", name, namespace, uid)
}
