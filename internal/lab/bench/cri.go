package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/providers/cri"
)

// CRIResult holds the figures of `vkubeletctl bench --provider cri`: the same pods
// run directly through the CRI, as crictl runp, create and start run them, and
// through a node with the CRI provider, on one private containerd, in one run.
type CRIResult struct {
	Pods int `json:"pods"`
	// Raw is the runtime alone: each pod's sandbox run, its image pulled if
	// absent, its container created and started by CRI calls from the
	// benchmark; "Running" is when StartContainer returned.
	Raw PathFigures `json:"raw"`
	// Vkubelet is the pod created in the API until it is seen Running there.
	Vkubelet PathFigures `json:"vkubelet"`
	// Overhead is vkubelet's time to start every pod over the raw path's, less
	// one; P50Overhead and P99Overhead compare the latencies likewise.
	Overhead    float64 `json:"overhead"`
	P50Overhead float64 `json:"p50_overhead"`
	P99Overhead float64 `json:"p99_overhead"`
	// AgentCPUSeconds is the node agent's CPU time while its pods started, from
	// the first create until the last was seen Running.
	AgentCPUSeconds float64 `json:"agent_cpu_s"`
	// LoadAverage is the machine's one-minute load average as the run began.
	LoadAverage float64 `json:"load_average"`
	// Runs holds each run's figures when the result is the median of several.
	Runs []*CRIResult `json:"runs,omitempty"`
}

// The node names of the two paths: the sandboxes of each carry it in the CRI
// provider's node label, so that each path finds (and cleans up) only its own.
const (
	criRawNode  = "bench-cri-raw"
	criNodeName = "bench-cri-node"
)

// RunCRI starts a private containerd with its registry and CNI network
// (crienv), then measures the raw path and the node (the vkubelet binary,
// --provider cri, a child process) with cfg.Pods pods of cfg.Shape running
// `sleep`, one after the other, with every sandbox and file of the first
// removed before the second starts.
func RunCRI(ctx context.Context, cfg Config) (*CRIResult, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Shape == "" {
		cfg.Shape = ShapeDeployment
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	cfg.Rate = 0
	res := &CRIResult{Pods: cfg.Pods, LoadAverage: loadAverage()}
	env, err := crienv.Start(ctx)
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	conn, err := env.Conn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c, err := loadClient(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	ns := namespaceName("cri")
	caPEM := caBundle(cfg.RESTConfig)
	tmpl, err := prepareNamespace(ctx, c, ns, cfg.Shape, caPEM)
	if err != nil {
		return nil, err
	}
	tmpl.image, tmpl.command = env.Busybox, []string{"sleep", "3600"}

	raw := &rawCRI{
		runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn),
		dir: filepath.Join(env.Dir, "raw"), warmImages: []string{env.Pause, env.Busybox},
		namespace: []byte(ns), caPEM: caPEM, clusterDomain: cri.DefaultClusterDomain,
	}
	if raw.dns, err = cri.NodeDNSConfig(cri.DefaultResolvConf); err != nil {
		return nil, err
	}
	if cfg.Shape == ShapeDeployment {
		// The raw path has no API server to ask for a token; it mounts one real
		// token, asked for once here, in every pod, the files the node writes.
		tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3607)}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("TokenRequest for %s/default: %w", ns, err)
		}
		raw.token = []byte(tr.Status.Token)
	}
	if err := raw.warmUp(ctx, tmpl, ns); err != nil {
		return nil, fmt.Errorf("raw CRI: warming up: %w", err)
	}

	fmt.Fprintf(cfg.Log, "bench: %d pods through the CRI directly\n", cfg.Pods)
	if res.Raw, err = raw.measure(ctx, cfg, tmpl, ns); err != nil {
		return nil, fmt.Errorf("raw CRI: %w", err)
	}
	if err := raw.clean(ctx); err != nil {
		return nil, fmt.Errorf("raw CRI: cleaning up: %w", err)
	}

	fmt.Fprintf(cfg.Log, "bench: %d pods through vkubelet --provider cri\n", cfg.Pods)
	if res.Vkubelet, res.AgentCPUSeconds, err = measureCRINode(ctx, c, cfg, env, tmpl, ns); err != nil {
		return nil, err
	}
	res.Overhead = ratio(res.Vkubelet.Seconds, res.Raw.Seconds)
	res.P50Overhead = ratio(res.Vkubelet.P50ms, res.Raw.P50ms)
	res.P99Overhead = ratio(res.Vkubelet.P99ms, res.Raw.P99ms)
	return res, nil
}

// ratio is a/b less one, or 0 without b.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a/b - 1
}

// measureCRINode runs the node agent with the CRI provider on env's containerd,
// creates the pods bound to it and times each from its create to Running, then
// deletes them (grace period 1 s, not measured) and stops the agent. It also
// returns the agent's CPU seconds while the pods started.
func measureCRINode(ctx context.Context, c kubernetes.Interface, cfg Config, env *crienv.Env, tmpl *podTemplate, ns string) (PathFigures, float64, error) {
	b, err := json.Marshal(cri.Config{RuntimeEndpoint: env.Socket, RootDir: filepath.Join(env.Dir, "node")})
	if err != nil {
		return PathFigures{}, 0, err
	}
	conf := filepath.Join(env.Dir, "provider.json")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return PathFigures{}, 0, err
	}
	n, err := startAgentWith(ctx, cfg, "vkubelet-cri", criNodeName, []string{"--provider", "cri", "--provider-config", conf})
	if err != nil {
		return PathFigures{}, 0, err
	}
	defer n.stop()
	if err := waitNodeReady(ctx, c, criNodeName, false); err != nil {
		return PathFigures{}, 0, n.failed(err)
	}
	o := observe(c, ns)
	defer close(o.stop)
	time.Sleep(2 * time.Second) // let start-up requests (lease, node status, informers) settle
	before, err := n.proc.Usage()
	if err != nil {
		return PathFigures{}, 0, err
	}
	lat, span, err := startPods(ctx, c, o, cfg, tmpl, ns, []string{criNodeName})
	if err != nil {
		return PathFigures{}, 0, n.failed(err)
	}
	after, err := n.proc.Usage()
	if err != nil {
		return PathFigures{}, 0, err
	}
	// `sleep` as a container's first process ignores SIGTERM: a short grace
	// period keeps the clean-up from waiting 30 s for each pod.
	err = forEach(ctx, cfg, cfg.Pods, func(i int) error {
		return c.CoreV1().Pods(ns).Delete(ctx, tmpl.name(i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	})
	if err == nil {
		err = o.waitGone(ctx, cfg.Pods, podTimeout(cfg.Pods))
	}
	if err != nil {
		return PathFigures{}, 0, n.failed(fmt.Errorf("deleting the pods: %w", err))
	}
	return figures(cfg.Pods, lat, span), after.CPUSeconds - before.CPUSeconds, nil
}

// rawCRI runs pods through the CRI without a node: what `crictl runp`, `crictl
// create` and `crictl start` do, with the sandbox and container configurations
// the CRI provider would give the same pod (labels, cgroup parent, log paths,
// DNS, hostname, resources, mounts).
type rawCRI struct {
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	// dir holds the pods' files: logs, volumes, hosts and termination files.
	dir        string
	warmImages []string
	// The contents of the token volume: one token for every pod, the cluster
	// CA, the namespace. token is empty for shapes without the volume.
	token, caPEM, namespace []byte
	dns                     *runtimeapi.DNSConfig
	clusterDomain           string
}

// warmUp pulls the sandbox and container images and runs one pod to the end
// and removes it, so that neither path pays for the first pull, the image's
// unpacking or the CNI bridge's creation.
func (r *rawCRI) warmUp(ctx context.Context, tmpl *podTemplate, ns string) error {
	for _, ref := range r.warmImages {
		if _, err := r.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			return fmt.Errorf("pulling %s: %w", ref, err)
		}
	}
	pod := tmpl.pod("bench-warm-up", criRawNode)
	pod.Namespace, pod.UID = ns, uuid.NewUUID()
	if err := r.start(ctx, r.admitted(pod)); err != nil {
		return err
	}
	return r.clean(ctx)
}

// measure runs every pod at once, each in a goroutine of its own, as the CRI
// provider runs each pod it is given in a goroutine of its own: the runtime
// sees as many pod starts in flight as the node lets it see at the most.
func (r *rawCRI) measure(ctx context.Context, cfg Config, tmpl *podTemplate, ns string) (PathFigures, error) {
	cfg.Concurrency = cfg.Pods
	var mu sync.Mutex
	lat := make([]time.Duration, 0, cfg.Pods)
	var first, last time.Time
	ctx, cancel := context.WithTimeout(ctx, podTimeout(cfg.Pods))
	defer cancel()
	err := forEach(ctx, cfg, cfg.Pods, func(i int) error {
		pod := tmpl.pod(tmpl.name(i), criRawNode)
		pod.Namespace, pod.UID = ns, uuid.NewUUID()
		t0 := time.Now()
		if err := r.start(ctx, r.admitted(pod)); err != nil {
			return fmt.Errorf("pod %s/%s: %w", ns, pod.Name, err)
		}
		t1 := time.Now()
		mu.Lock()
		defer mu.Unlock()
		lat = append(lat, t1.Sub(t0))
		if first.IsZero() || t0.Before(first) {
			first = t0
		}
		if t1.After(last) {
			last = t1
		}
		return nil
	})
	if err != nil {
		return PathFigures{}, err
	}
	return figures(cfg.Pods, lat, last.Sub(first)), nil
}

// The token volume the ServiceAccount admission plugin adds to a pod, where it
// mounts it.
const (
	tokenVolume    = "kube-api-access-bench"
	tokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// admitted is pod as the API server would store it, as far as the runtime
// sees: with the ServiceAccount admission plugin's token volume mounted in
// each container, when the raw path has a token to put in it.
func (r *rawCRI) admitted(pod *corev1.Pod) *corev1.Pod {
	if len(r.token) == 0 {
		return pod
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: tokenVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}})
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].VolumeMounts = append(pod.Spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: tokenVolume, MountPath: tokenMountPath, ReadOnly: true})
	}
	return pod
}

// start runs pod's sandbox and starts its one container, as the CRI provider's
// first sync of a new pod does: the pod's files written, RunPodSandbox, the
// sandbox's IP read for the hosts file, ImageStatus (and PullImage if the image
// is absent), CreateContainer, StartContainer.
func (r *rawCRI) start(ctx context.Context, pod *corev1.Pod) error {
	dir := filepath.Join(r.dir, "pods", string(pod.UID))
	sb := rawSandboxConfig(pod, criRawNode, r.logDir(pod), r.dns)
	if err := os.MkdirAll(sb.LogDirectory, 0o755); err != nil {
		return err
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name != tokenVolume {
			continue
		}
		vdir := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		for name, data := range map[string][]byte{"token": r.token, "ca.crt": r.caPEM, "namespace": r.namespace} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	run, err := r.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sb})
	if err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	st, err := r.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId})
	if err != nil {
		return fmt.Errorf("PodSandboxStatus: %w", err)
	}
	c := &pod.Spec.Containers[0]
	var mounts []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: filepath.Join(dir, "volumes", vm.Name), Readonly: true})
	}
	hosts := filepath.Join(dir, "etc-hosts")
	if err := os.WriteFile(hosts, cri.PodHostsFile(st.GetStatus().GetNetwork().GetIp(), pod.Name), 0o644); err != nil {
		return err
	}
	termination := filepath.Join(dir, "containers", c.Name, "0")
	if err := os.MkdirAll(filepath.Dir(termination), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(termination, nil, 0o666); err != nil {
		return err
	}
	mounts = append(mounts, &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: hosts},
		&runtimeapi.Mount{ContainerPath: "/dev/termination-log", HostPath: termination})
	img := &runtimeapi.ImageSpec{Image: c.Image}
	is, err := r.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: img})
	if err != nil {
		return fmt.Errorf("ImageStatus: %w", err)
	}
	if is.Image == nil {
		if _, err := r.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: img, SandboxConfig: sb}); err != nil {
			return fmt.Errorf("PullImage: %w", err)
		}
	}
	created, err := r.runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: run.PodSandboxId, Config: rawContainerConfig(pod, c, criRawNode, mounts), SandboxConfig: sb})
	if err != nil {
		return fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := r.runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return fmt.Errorf("StartContainer: %w", err)
	}
	return nil
}

func (r *rawCRI) logDir(pod *corev1.Pod) string {
	return filepath.Join(r.dir, "logs", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

// clean stops and removes every sandbox of the raw path (their containers with
// them), the pods' cgroups and files, and checks that the runtime runs no
// sandbox and no container any more.
func (r *rawCRI) clean(ctx context.Context) error {
	list, err := r.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"vkubelet.io/node": criRawNode}}})
	if err != nil {
		return err
	}
	for _, sb := range list.Items {
		if _, err := r.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("StopPodSandbox: %w", err)
		}
		if _, err := r.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("RemovePodSandbox: %w", err)
		}
		crienv.RemovePodCgroups(sb.GetMetadata().GetUid())
	}
	if err := crienv.RemoveAllMounted(r.dir); err != nil {
		return err
	}
	left, err := r.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	ctrs, err := r.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	if len(left.Items) > 0 || len(ctrs.Containers) > 0 {
		return fmt.Errorf("%d sandboxes and %d containers left in the runtime", len(left.Items), len(ctrs.Containers))
	}
	return nil
}

// rawSandboxConfig is the sandbox the CRI provider asks for pod (one with a
// network namespace of its own, no security context), on node.
func rawSandboxConfig(pod *corev1.Pod, node, logDir string, dns *runtimeapi.DNSConfig) *runtimeapi.PodSandboxConfig {
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels["vkubelet.io/node"] = node
	labels["io.kubernetes.pod.name"] = pod.Name
	labels["io.kubernetes.pod.namespace"] = pod.Namespace
	labels["io.kubernetes.pod.uid"] = string(pod.UID)
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)},
		Hostname:     pod.Name,
		LogDirectory: logDir,
		DnsConfig:    dns,
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    "/vkubelet/pod" + string(pod.UID),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: podNamespaces()},
		},
	}
}

func podNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
}

// rawContainerConfig is the first instance of container c of pod as the CRI
// provider creates it: its command, literal environment, CPU shares from its
// request, the labels and annotations the provider reads back, and mounts.
func rawContainerConfig(pod *corev1.Pod, c *corev1.Container, node string, mounts []*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	shares := int64(2) // the kubelet's minimum
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		shares = max(q.MilliValue()*1024/1000, shares)
	}
	// The cpu and memory it was created with, which the provider notes on
	// each container for a resize that needs a restart.
	resourcesKey, resources := cri.ResourcesAnnotation(pod, c)
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name},
		Image:    &runtimeapi.ImageSpec{Image: c.Image},
		Command:  c.Command,
		Args:     c.Args,
		Mounts:   mounts,
		LogPath:  filepath.Join(c.Name, "0.log"),
		Labels: map[string]string{
			"vkubelet.io/node":             node,
			"io.kubernetes.pod.name":       pod.Name,
			"io.kubernetes.pod.namespace":  pod.Namespace,
			"io.kubernetes.pod.uid":        string(pod.UID),
			"io.kubernetes.container.name": c.Name,
			"vkubelet.io/round":            "0",
		},
		Annotations: map[string]string{
			resourcesKey:                                       resources,
			"io.kubernetes.container.restartCount":             "0",
			"vkubelet.io/image":                                c.Image,
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": string(corev1.TerminationMessageReadFile),
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			// A burstable pod's score where the node's memory is not known
			// (999); the score costs the runtime nothing, whatever it is.
			Resources:       &runtimeapi.LinuxContainerResources{CpuShares: shares, OomScoreAdj: 999},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: podNamespaces()},
		},
	}
	for _, e := range c.Env {
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	return cfg
}

// loadAverage is the one-minute load average of the machine, 0 if unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// MedianCRI is the median of each figure over several runs, with the runs in
// Runs.
func MedianCRI(runs []*CRIResult) *CRIResult {
	if len(runs) == 1 {
		return runs[0]
	}
	pick := func(get func(*CRIResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	return &CRIResult{
		Pods:            runs[0].Pods,
		Raw:             medianFigures(len(runs), func(i int) PathFigures { return runs[i].Raw }),
		Vkubelet:        medianFigures(len(runs), func(i int) PathFigures { return runs[i].Vkubelet }),
		Overhead:        pick(func(r *CRIResult) float64 { return r.Overhead }),
		P50Overhead:     pick(func(r *CRIResult) float64 { return r.P50Overhead }),
		P99Overhead:     pick(func(r *CRIResult) float64 { return r.P99Overhead }),
		AgentCPUSeconds: pick(func(r *CRIResult) float64 { return r.AgentCPUSeconds }),
		LoadAverage:     pick(func(r *CRIResult) float64 { return r.LoadAverage }),
		Runs:            runs,
	}
}
