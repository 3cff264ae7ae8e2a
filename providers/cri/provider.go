package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// The interfaces of the provider contract the CRI provider implements.
var (
	_ provider.PodLifecycleHandler      = (*Provider)(nil)
	_ provider.ResolvedPodHandler       = (*Provider)(nil)
	_ provider.VolumeUpdater            = (*Provider)(nil)
	_ provider.PodNotifier              = (*Provider)(nil)
	_ provider.NodeProvider             = (*Provider)(nil)
	_ provider.NodeConfigurer           = (*Provider)(nil)
	_ provider.StatsProvider            = (*Provider)(nil)
	_ provider.ResourceMetricsProvider  = (*Provider)(nil)
	_ provider.ContainerLogsProvider    = (*Provider)(nil)
	_ provider.ContainerExecProvider    = (*Provider)(nil)
	_ provider.ContainerAttachProvider  = (*Provider)(nil)
	_ provider.PortForwardProvider      = (*Provider)(nil)
	_ provider.EphemeralContainerRunner = (*Provider)(nil)
	_ provider.InPlaceResizer           = (*Provider)(nil)
	_ provider.FeatureDeclarer          = (*Provider)(nil)
)

// Labels put on every sandbox and container the provider creates. labelNode finds
// the sandboxes of this node again after a restart.
const (
	labelNode          = "vkubelet.io/node"
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	// rpcTimeout bounds the CRI calls that should be quick.
	rpcTimeout = 2 * time.Minute
	// takeOverReadTime bounds how long New reads the pods it takes over
	// (readTakenOver): a pod not read by then is read by its goroutine.
	takeOverReadTime = 10 * time.Second
)

// Provider runs pods on a CRI runtime. Create it with New; Close stops its goroutines
// and leaves the containers running. All its methods are safe for concurrent use.
type Provider struct {
	nodeName string
	// backoffs are the crash-loop and retry back-offs of every pod's sandbox
	// and containers (backoff.go).
	backoffs *flowcontrol.Backoff
	cfg      Config
	log      *slog.Logger
	started  time.Time

	conn    *grpc.ClientConn
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient

	// ctx lives until Close: the pods' goroutines run under it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards everything below, and the fields of the pod records that say so.
	mu         sync.Mutex
	pods       map[string]*podRecord // by namespace/name
	hostIP     string
	node       *corev1.Node
	notify     func(*corev1.Pod)
	notifyNode func(*corev1.Node)
	// event records an Event on a pod (RecordPodEvents); nil until then.
	event func(provider.PodEvent)

	// statsMu guards cpuSamples: the last cumulative CPU of each container, to turn
	// the runtime's counters into rates.
	statsMu    sync.Mutex
	cpuSamples map[string]cpuSample
}

// Option changes how New builds the provider.
type Option func(*Provider)

// WithLogger sets the logger; the default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithHostIP sets the hostIP the provider reports for its pods, unless the Config
// names one.
func WithHostIP(ip string) Option { return func(p *Provider) { p.hostIP = ip } }

// New connects to the runtime of cfg and takes over the sandboxes it already runs for
// nodeName (see the package doc).
func New(ctx context.Context, cfg Config, nodeName string, opts ...Option) (*Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cri provider config: %w", err)
	}
	p := &Provider{
		backoffs:   flowcontrol.NewBackOff(cfg.BackoffBase.Duration, cfg.BackoffMax.Duration),
		nodeName:   nodeName,
		cfg:        cfg,
		log:        slog.Default(),
		started:    time.Now(),
		pods:       map[string]*podRecord{},
		cpuSamples: map[string]cpuSample{},
	}
	for _, opt := range opts {
		opt(p)
	}
	if cfg.HostIP != "" {
		p.hostIP = cfg.HostIP
	}
	if p.hostIP == "" {
		p.hostIP = defaultHostIP()
	}
	p.log = p.log.With("provider", "cri", "node", nodeName)
	for _, d := range []string{p.podsDir(), p.logsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cri provider: %w", err)
		}
	}
	conn, err := grpc.NewClient(cfg.endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("cri provider: runtime %s: %w", cfg.RuntimeEndpoint, err)
	}
	p.conn = conn
	p.runtime = runtimeapi.NewRuntimeServiceClient(conn)
	p.images = runtimeapi.NewImageServiceClient(conn)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if err := p.recover(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close stops the pods' goroutines and the connection to the runtime. Containers
// keep running: a new Provider on the same runtime and RootDir takes them over.
func (p *Provider) Close() {
	p.cancel()
	p.wg.Wait()
	_ = p.conn.Close()
}

func (p *Provider) podsDir() string              { return filepath.Join(p.cfg.RootDir, "pods") }
func (p *Provider) logsDir() string              { return filepath.Join(p.cfg.RootDir, "logs") }
func (p *Provider) podDir(uid types.UID) string  { return filepath.Join(p.podsDir(), string(uid)) }
func (p *Provider) podFile(uid types.UID) string { return filepath.Join(p.podDir(uid), "pod.json") }

// CreatePod runs a pod that was not resolved: environment variables with a literal
// value only, volumes without contents, no pull credentials.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.CreateResolvedPod(ctx, unresolved(pod))
}

// UpdatePod is UpdateResolvedPod for a pod that was not resolved.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.UpdateResolvedPod(ctx, unresolved(pod))
}

// unresolved builds the ResolvedPod of a pod without API lookups.
func unresolved(pod *corev1.Pod) *provider.ResolvedPod {
	rp := &provider.ResolvedPod{Pod: pod, Env: map[string][]corev1.EnvVar{}}
	add := func(cs []corev1.Container) {
		for _, c := range cs {
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
				}
			}
			rp.Env[c.Name] = env
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	add(ephemeralContainers(pod))
	return rp
}

// CreateResolvedPod accepts the pod and starts its goroutine, which runs it. A pod
// with the same UID as one the provider has is left alone.
func (p *Provider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	if err := p.validate(rp.Pod); err != nil {
		return err
	}
	rp = copyResolved(rp)
	key := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	if old, ok := p.pods[key]; ok {
		p.mu.Unlock()
		if old.uid == rp.Pod.UID {
			return nil
		}
		p.requestDelete(old, 0)
		return errdefs.Unavailable("cri: pod %s: an earlier pod of that name (uid %s) is still stopping", key, old.uid)
	}
	p.mu.Unlock()
	if err := p.savePod(rp); err != nil {
		return fmt.Errorf("cri: pod %s: %w", key, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pods[key]; ok {
		return errdefs.Unavailable("cri: pod %s is being created concurrently", key)
	}
	rec := newPodRecord(rp, time.Now())
	p.pods[key] = rec
	p.startWorker(rec)
	p.log.Info("pod accepted", "pod", key, "uid", rp.Pod.UID)
	return nil
}

// UpdateResolvedPod stores the new pod. A container whose image changed is stopped,
// so that it restarts (as its restartPolicy allows) with the new image; an
// ephemeral container new in the spec is started (ephemeral.go); a container
// whose resources changed is resized in place first (resize.go), and the pod is
// stored only once it is.
func (p *Provider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	key := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	rec, ok := p.pods[key]
	p.mu.Unlock()
	if !ok || rec.uid != rp.Pod.UID {
		return providerutil.PodNotFound("cri", rp.Pod.Namespace, rp.Pod.Name)
	}
	if err := p.validate(rp.Pod); err != nil {
		return err
	}
	rp = copyResolved(rp)
	p.mu.Lock()
	old := rec.pod
	p.mu.Unlock()
	if err := p.resizeRunning(ctx, rec, old, rp.Pod); err != nil {
		return err
	}
	if err := p.savePod(rp); err != nil {
		return fmt.Errorf("cri: pod %s: %w", key, err)
	}
	p.mu.Lock()
	rec.pod, rec.env, rec.creds = rp.Pod, rp.Env, rp.PullCredentials
	if rp.Volumes != nil {
		rec.volumes = rp.Volumes
		rec.volumesDirty = true
	}
	p.mu.Unlock()
	rec.wakeUp()
	return nil
}

// UpdatePodVolumes writes the new contents of the pod's configMap, secret,
// downwardAPI and projected volumes; running containers see them at once.
func (p *Provider) UpdatePodVolumes(ctx context.Context, rp *provider.ResolvedPod) error {
	key := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	rec, ok := p.pods[key]
	if !ok || rec.uid != rp.Pod.UID {
		p.mu.Unlock()
		return providerutil.PodNotFound("cri", rp.Pod.Namespace, rp.Pod.Name)
	}
	rec.volumes = copyResolved(rp).Volumes
	pod, env, creds, vols := rec.pod, rec.env, rec.creds, rec.volumes
	p.mu.Unlock()
	if err := p.writeVolumes(pod, vols); err != nil {
		return fmt.Errorf("cri: pod %s: volumes: %w", key, err)
	}
	return p.savePod(&provider.ResolvedPod{Pod: pod, Env: env, PullCredentials: creds, Volumes: vols})
}

// DeletePod asks the pod's goroutine to stop it within its grace period and returns.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	rec, ok := p.pods[providerutil.PodKey(pod.Namespace, pod.Name)]
	p.mu.Unlock()
	if !ok || (pod.UID != "" && rec.uid != pod.UID) {
		return providerutil.PodNotFound("cri", pod.Namespace, pod.Name)
	}
	p.requestDelete(rec, provider.GracePeriod(pod))
	return nil
}

// requestDelete marks rec for deletion by grace from now; a later call may only
// shorten the deadline.
func (p *Provider) requestDelete(rec *podRecord, grace time.Duration) {
	deadline := time.Now().Add(grace)
	p.mu.Lock()
	if !rec.deleting || deadline.Before(rec.deleteBy) {
		rec.deleting, rec.deleteBy = true, deadline
	}
	p.mu.Unlock()
	rec.wakeUp()
}

// GetPod returns the pod with its current status.
func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, ok := p.pods[providerutil.PodKey(namespace, name)]
	if !ok {
		return nil, providerutil.PodNotFound("cri", namespace, name)
	}
	return rec.podLocked(), nil
}

// GetPodStatus returns the pod's status as last computed by its goroutine.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, ok := p.pods[providerutil.PodKey(namespace, name)]
	if !ok {
		return nil, providerutil.PodNotFound("cri", namespace, name)
	}
	return rec.status.DeepCopy(), nil
}

// GetPods returns every pod the provider runs, with its status.
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, rec := range p.pods {
		out = append(out, rec.podLocked())
	}
	return out, nil
}

// NotifyPods keeps the callback the pods' goroutines call when a status changes.
func (p *Provider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

// RecordPodEvents keeps the node's Event recorder: the provider records what
// the kubelet would (provider.PodEventRecorder).
func (p *Provider) RecordPodEvents(record func(provider.PodEvent)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.event = record
}

// recordEvent records an Event of eventType on pod, or on its container if
// container is not "", once the node has given its recorder.
func (p *Provider) recordEvent(pod *corev1.Pod, container, eventType, reason, message string) {
	p.mu.Lock()
	record := p.event
	p.mu.Unlock()
	if record != nil {
		record(provider.PodEvent{Pod: pod, Container: container, Type: eventType, Reason: reason, Message: message})
	}
}

// AdmitPod refuses, as the kubelet's admission does, a pod that sets a
// sysctl the node does not allow: it fails at once with reason
// SysctlForbidden (provider.PodAdmitter).
func (p *Provider) AdmitPod(pod *corev1.Pod) (reason, message string, ok bool) {
	if err := p.forbiddenSysctl(pod); err != nil {
		return "SysctlForbidden", err.Error(), false
	}
	return "", "", true
}

// validate refuses pods the provider can never run.
func (p *Provider) validate(pod *corev1.Pod) error {
	key := providerutil.PodKey(pod.Namespace, pod.Name)
	if pod.UID == "" {
		return errdefs.InvalidInput("cri: pod %s has no UID", key)
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil, v.HostPath != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
		default:
			return errdefs.InvalidInput("cri: pod %s: volume %q: only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported", key, v.Name)
		}
	}
	if pod.Spec.DNSPolicy == corev1.DNSNone && (pod.Spec.DNSConfig == nil || len(pod.Spec.DNSConfig.Nameservers) == 0) {
		// The runtime would give such a pod the node's resolv.conf instead.
		return errdefs.InvalidInput("cri: pod %s: dnsPolicy None needs a dnsConfig with at least one nameserver", key)
	}
	if err := p.forbiddenSysctl(pod); err != nil {
		return errdefs.InvalidInput("cri: pod %s: %v", key, err)
	}
	if !p.cfg.AllowPrivileged {
		// Ephemeral containers are refused one by one when they are to start, so
		// that the others and the update of the pod go on (containerConfig).
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return errdefs.InvalidInput("cri: pod %s: container %q is privileged, which this node does not allow", key, c.Name)
			}
		}
	}
	return nil
}

// allContainers are the pod's init, app and ephemeral containers.
func allContainers(pod *corev1.Pod) []corev1.Container {
	return slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers, ephemeralContainers(pod))
}

func copyResolved(rp *provider.ResolvedPod) *provider.ResolvedPod {
	out := &provider.ResolvedPod{Pod: rp.Pod.DeepCopy(), Env: map[string][]corev1.EnvVar{}}
	for k, v := range rp.Env {
		out.Env[k] = append([]corev1.EnvVar(nil), v...)
	}
	if rp.Volumes != nil {
		out.Volumes = map[string]*provider.VolumeContents{}
		for k, v := range rp.Volumes {
			if v == nil {
				continue
			}
			vc := &provider.VolumeContents{}
			for _, f := range v.Files {
				f.Data = append([]byte(nil), f.Data...)
				vc.Files = append(vc.Files, f)
			}
			out.Volumes[k] = vc
		}
	}
	out.PullCredentials = append([]provider.RegistryCredential(nil), rp.PullCredentials...)
	return out
}

// defaultHostIP is the first non-loopback IPv4 address of the host, else 127.0.0.1.
func defaultHostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// errContext wraps err with the pod it is about.
func errContext(key string, err error) error {
	if err == nil {
		return nil
	}
	var ee *provider.ExecError
	if errors.As(err, &ee) {
		return err
	}
	return fmt.Errorf("cri: pod %s: %w", key, err)
}
