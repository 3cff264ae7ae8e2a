package mock

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vkubelet/vkubelet/internal/compact/unixtime"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// The interfaces of the provider contract the mock implements.
var (
	_ provider.PodLifecycleHandler     = (*Provider)(nil)
	_ provider.PodNotifier             = (*Provider)(nil)
	_ provider.NodeProvider            = (*Provider)(nil)
	_ provider.NodeConfigurer          = (*Provider)(nil)
	_ provider.StatsProvider           = (*Provider)(nil)
	_ provider.ResourceMetricsProvider = (*Provider)(nil)
	_ provider.ContainerLogsProvider   = (*Provider)(nil)
	_ provider.ContainerExecProvider   = (*Provider)(nil)
	_ provider.ContainerAttachProvider = (*Provider)(nil)
	_ provider.PortForwardProvider     = (*Provider)(nil)
	_ provider.ResolvedPodHandler      = (*Provider)(nil)
	_ provider.VolumeUpdater           = (*Provider)(nil)
)

const (
	// defaultHostIP is the pods' hostIP when neither WithHostIP nor the node's
	// InternalIP (seen by ConfigureNode) gives one.
	defaultHostIP = "10.0.0.1"
)

// firstPodIP is the first address handed to a pod (10.244.0.1); the next pods count
// up from it.
var firstPodIP = binary.BigEndian.Uint32(net.IPv4(10, 244, 0, 1).To4())

// Provider is the in-memory mock provider. Create it with New. All its methods are
// safe for concurrent use.
type Provider struct {
	nodeName string
	cfg      Config
	clock    clock.WithTicker
	log      *slog.Logger
	started  time.Time // when New ran: the node's stats start time

	// failMu guards rng, which decides the injected failures (nil without them).
	failMu sync.Mutex
	rng    *rand.Rand

	// mu guards everything below. Pod records are immutable once stored (a change
	// stores a new record), so a snapshot of pointers can be read after unlocking.
	mu   sync.Mutex
	pods map[string]*podRecord // by namespace/name
	// The counts' maps are made by their first count (count): an idle node
	// of a NodeSet's thousand keeps none.
	createCounts map[types.UID]int   // pods actually created, by UID (persisted)
	deleteCalls  map[types.UID]int   // DeletePod calls, by UID (persisted)
	updateCalls  map[types.UID]int   // UpdatePod calls, by UID
	overlaps     int                 // CreatePods of a name whose earlier incarnation had not stopped
	nextIP       uint32              // offset from firstPodIP of the next pod IP (persisted)
	hostIP       string              // given by WithHostIP, else the node's InternalIP
	hostIPFixed  bool                // hostIP came from WithHostIP: ConfigureNode leaves it
	capacity     corev1.ResourceList // set by SetCapacity; nil: the config's (capacityLocked)
	notifyNode   func(*corev1.Node)  // from NotifyNodeStatus
	pingErr      error               // what Ping returns (SetPingError)
	sched        *scheduler          // delivers pod notifications while NotifyPods' ctx lives
	version      uint64              // bumped on every change the StateFile must record
	cpuCoreNanos uint64              // the node's cumulative CPU, integrated at each sample
	cpuSampledAt time.Time           // when cpuCoreNanos was last brought up to date
	volumeCalls  map[string]int      // UpdatePodVolumes calls by namespace/name
	// gone lists the pods dropped, oldest first, so that their counts above
	// are forgotten countsKept after (goneLocked).
	gone       []gonePod
	countsKept time.Duration

	// saveMu serialises writes of the StateFile; savedVersion is the version on disk.
	saveMu       sync.Mutex
	savedVersion uint64
}

// Option changes how New builds the provider.
type Option func(*Provider)

// WithClock makes the provider read time and set its timers from c, so that tests can
// drive it with a fake clock. The default is the real clock.
func WithClock(c clock.WithTicker) Option {
	return func(p *Provider) { p.clock = c }
}

// WithLogger sets the logger; the default is slog.Default(). The mock logs pod
// transitions at debug level and persistence problems at warning level.
func WithLogger(l *slog.Logger) Option {
	return func(p *Provider) { p.log = l }
}

// WithHostIP sets the hostIP the mock reports for its pods (and the podIP of
// hostNetwork pods). Without it the mock uses the node's InternalIP as seen by
// ConfigureNode, or 10.0.0.1 before that.
func WithHostIP(ip string) Option {
	return func(p *Provider) {
		p.hostIP = ip
		p.hostIPFixed = true
	}
}

// New returns a mock provider for the node nodeName. Empty capacity fields of cfg take
// their defaults. With cfg.StateFile set, New loads the pods and counts saved there by
// an earlier process, if the file exists.
func New(cfg Config, nodeName string, opts ...Option) (*Provider, error) {
	cfg = cfg.withDefaults()
	if _, err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mock provider config: %w", err)
	}
	if cfg.ProviderID == "" {
		cfg.ProviderID = "mock://" + nodeName
	}
	p := &Provider{
		nodeName:   nodeName,
		cfg:        cfg,
		clock:      clock.RealClock{},
		log:        slog.Default(),
		pods:       map[string]*podRecord{},
		countsKept: countsKept,
		hostIP:     defaultHostIP,
	}
	for _, opt := range opts {
		opt(p)
	}
	p.log = p.log.With("provider", "mock", "node", nodeName)
	p.started = p.clock.Now()
	p.cpuSampledAt = p.started
	if cfg.FailureRate > 0 {
		seed := uint64(cfg.Seed)
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		p.rng = rand.New(rand.NewPCG(seed, seed))
	}
	if cfg.StateFile != "" {
		if err := p.load(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// CreatePod accepts the pod: it is Pending until StartDelay has passed, then Running.
// Creating a pod that exists with the same UID does nothing; with another UID, the new
// pod replaces the old one.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.createPod(ctx, pod, nil)
}

// createPod is CreatePod, keeping resolution with the pod unless it is nil.
func (p *Provider) createPod(ctx context.Context, pod *corev1.Pod, resolution *keptResolution) error {
	if err := p.answerLate(ctx); err != nil {
		return err
	}
	if err := p.injectFailure("create", pod); err != nil {
		return err
	}
	key := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	now := p.clock.Now()
	if old := p.lookupLocked(key, now); old != nil && old.uid == pod.UID {
		if resolution != nil {
			rec := *old
			rec.setResolution(resolution)
			p.pods[key] = &rec
		}
		p.mu.Unlock()
		// A retry: it may follow a failed write of the StateFile.
		return p.save()
	}
	rec, err := newRecord(key, pod)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	if old := p.pods[key]; old != nil {
		if !old.goneAt(now) {
			// The old one has not stopped: a back end that keeps pods
			// apart (containers, jobs) would run both now.
			p.overlaps++
		}
		// Another incarnation under the name, replaced: its count goes like a
		// stopped pod's.
		p.keepCreatesLocked(old)
		p.goneLocked(old.uid, key, now)
	}
	// A pod created again after it went has its count in createCounts.
	rec.countCreate(p.createCounts[pod.UID])
	delete(p.createCounts, pod.UID)
	rec.setResolution(resolution)
	rec.hostIP, rec.created, rec.running = p.hostIP, unixtime.Of(now), unixtime.Of(now.Add(p.cfg.StartDelay.Duration))
	if !pod.Spec.HostNetwork {
		rec.podIP = p.allocIPLocked()
	}
	p.pods[key] = rec
	p.version++
	if s := p.schedulerLocked(); s != nil {
		p.pushLocked(s, now, rec)
		if rec.running.Time().After(now) {
			p.pushLocked(s, rec.running.Time(), rec)
		}
	}
	p.mu.Unlock()
	p.log.Debug("pod created", "pod", key, "uid", pod.UID, "podIP", rec.podIPText(), "running", rec.running.Time())
	return p.save()
}

// ResizesInPlace: the mock takes a pod's new resources as they come
// (provider.InPlaceResizer), as it takes any change of its spec.
func (p *Provider) ResizesInPlace() bool { return true }

// UpdatePod stores the new spec and metadata of the pod (the reported container
// images follow the spec). Its state (pending, running, deleting) is unchanged.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.updatePod(ctx, pod, nil)
}

// updatePod is UpdatePod, keeping resolution with the pod unless it is nil
// (the last one stays then).
func (p *Provider) updatePod(ctx context.Context, pod *corev1.Pod, resolution *keptResolution) error {
	p.mu.Lock()
	count(&p.updateCalls, pod.UID, 1)
	p.mu.Unlock()
	if err := p.answerLate(ctx); err != nil {
		return err
	}
	if err := p.injectFailure("update", pod); err != nil {
		return err
	}
	key := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	now := p.clock.Now()
	old := p.lookupLocked(key, now)
	if old == nil || old.uid != pod.UID {
		p.mu.Unlock()
		return providerutil.PodNotFound("mock", pod.Namespace, pod.Name)
	}
	rec := *old
	if err := rec.setPod(pod); err != nil {
		p.mu.Unlock()
		return err
	}
	if resolution != nil {
		rec.setResolution(resolution)
	}
	p.pods[key] = &rec
	p.version++
	if s := p.schedulerLocked(); s != nil {
		p.pushLocked(s, now, &rec)
	}
	p.mu.Unlock()
	p.log.Debug("pod updated", "pod", key, "uid", pod.UID)
	return p.save()
}

// DeletePod starts stopping the pod and returns. Its containers are reported
// terminated, and the pod gone, after StopDelay or its grace period, whichever is
// shorter. A second call can shorten that time, never lengthen it.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	count(&p.deleteCalls, pod.UID, 1)
	p.version++
	p.mu.Unlock()
	if err := p.answerLate(ctx); err != nil {
		return err
	}
	if err := p.injectFailure("delete", pod); err != nil {
		return err
	}

	key := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	now := p.clock.Now()
	old := p.lookupLocked(key, now)
	if old == nil || old.uid != pod.UID {
		// A pod the mock does not run: its count goes like a stopped pod's.
		p.goneLocked(pod.UID, key, now)
		p.mu.Unlock()
		// The count above still needs saving.
		if err := p.save(); err != nil {
			return err
		}
		return providerutil.PodNotFound("mock", pod.Namespace, pod.Name)
	}
	rec := *old
	if err := rec.setPod(pod); err != nil {
		p.mu.Unlock()
		return err
	}
	stopAt := now.Add(min(p.cfg.StopDelay.Duration, provider.GracePeriod(pod)) + p.cfg.StopOverrun.Duration)
	if !rec.deleting() {
		rec.deleted = unixtime.Of(now)
		rec.stopped = unixtime.Of(stopAt)
	} else if stopAt.Before(rec.stopped.Time()) {
		rec.stopped = unixtime.Of(stopAt)
	}
	p.pods[key] = &rec
	p.version++
	if s := p.schedulerLocked(); s != nil {
		p.pushLocked(s, rec.stopped.Time(), &rec)
	}
	p.mu.Unlock()
	p.log.Debug("pod deleting", "pod", key, "uid", pod.UID, "stopped", rec.stopped.Time())
	return p.save()
}

// GetPod returns a copy of the pod with its current status, or a NotFound error once
// it has stopped.
func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	rec := p.lookupLocked(providerutil.PodKey(namespace, name), now)
	if rec == nil {
		return nil, providerutil.PodNotFound("mock", namespace, name)
	}
	return rec.podAt(now), nil
}

// GetPodStatus returns the pod's current status, or a NotFound error once it has
// stopped.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	if err := p.answerLate(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	rec := p.lookupLocked(providerutil.PodKey(namespace, name), now)
	if rec == nil {
		return nil, providerutil.PodNotFound("mock", namespace, name)
	}
	status := podStatusAt(rec, rec.pod(), now)
	return &status, nil
}

// GetPods returns copies of every pod that has not stopped, sorted by namespace/name.
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	return p.Pods(), nil
}

// Pods returns copies of every pod that has not stopped, with their status, sorted
// by namespace/name. It is meant for tests.
func (p *Provider) Pods() []*corev1.Pod {
	now, recs := p.snapshot()
	pods := make([]*corev1.Pod, 0, len(recs))
	for _, rec := range recs {
		pods = append(pods, rec.podAt(now))
	}
	return pods
}

// snapshot returns the time and the records of the pods that exist then, sorted by
// namespace/name. The records are immutable, so the caller may read them unlocked.
func (p *Provider) snapshot() (time.Time, []*podRecord) {
	p.mu.Lock()
	now := p.clock.Now()
	recs := make([]*podRecord, 0, len(p.pods))
	for key := range p.pods {
		if rec := p.lookupLocked(key, now); rec != nil {
			recs = append(recs, rec)
		}
	}
	p.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].key < recs[j].key })
	return now, recs
}

// CreateCount returns how many times a pod with this UID was actually created, not
// counting idempotent repeats. It is kept in the StateFile, so a test can tell whether
// a restarted controller created a pod twice. It is meant for tests. This and the
// other call counts are forgotten 10 minutes after the pod stopped (countsKept).
func (p *Provider) CreateCount(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range p.pods {
		if rec.uid == uid {
			return int(rec.creates)
		}
	}
	return p.createCounts[uid]
}

// UpdateCalls returns how many times UpdatePod was called for this UID, whatever
// the outcome. It is meant for tests: a node that relists or resyncs must not
// call it for pods that did not change.
func (p *Provider) UpdateCalls(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.updateCalls[uid]
}

// DeleteCalls returns how many times DeletePod was called for this UID, whatever the
// outcome (injected failures and NotFound answers included). It is meant for tests.
func (p *Provider) DeleteCalls(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleteCalls[uid]
}

// Overlaps is how many times CreatePod replaced an incarnation of the same
// name that had not stopped yet: two copies of one pod at once, as a back end
// that keeps its pods apart would run them. A StatefulSet's pod never should.
func (p *Provider) Overlaps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overlaps
}

// count adds n to (*m)[k], making *m first if it is nil.
func count[K comparable](m *map[K]int, k K, n int) {
	if *m == nil {
		*m = map[K]int{}
	}
	(*m)[k] += n
}
