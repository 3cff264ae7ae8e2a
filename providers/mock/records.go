package mock

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/compact/podpack"
	"github.com/vkubelet/vkubelet/internal/compact/unixtime"
)

// podRecord is what the mock knows of one pod. Its status is not stored: it is a
// function of these times and the clock (see status.go). Records are never modified
// once stored in Provider.pods.
//
// The pod itself is kept packed (internal/compact/podpack), as the pod controller's cache
// keeps it: the mock stands in for a back end that holds its pods elsewhere, and
// `vkubeletctl bench` measures the node agent's memory with it, which a decoded copy
// per pod (several KiB) would swamp.
type podRecord struct {
	// key is namespace/name: the record's key in Provider.pods, one string for
	// both.
	key string
	uid types.UID
	// packed is the pod as last given by CreatePod, UpdatePod or DeletePod
	// (internal/compact/podpack), in a string (never written) for its 8 bytes fewer
	// than a slice's.
	packed string
	hostIP string
	// podIP is the pod's address, an IPv4 address as a number (4 bytes
	// against 16 and the text's), or 0 for the hostIP (a hostNetwork pod):
	// see podIPText.
	podIP uint32
	// creates counts the times a pod of this UID was created (CreateCount),
	// kept here, in room the record has anyway, while the pod runs, and in
	// Provider.createCounts once it is gone: an entry there for every pod
	// took about 36 bytes a pod.
	creates uint16
	// resolved is set when resolution holds the pod's last resolution.
	resolved bool
	// The times are kept in 8 bytes each (unixtime.Instant), not a time.Time's 24.
	created unixtime.Instant // CreatePod accepted it
	running unixtime.Instant // created + StartDelay: its containers run from then on
	deleted unixtime.Instant // DeletePod was first called; zero if it was not
	stopped unixtime.Instant // its containers stop then; zero unless deleted
	// resolution is what the mock keeps of the pod's last resolution, if
	// resolved (not persisted): inline, where a pointer to its own object
	// took 64 bytes more a pod.
	resolution keptResolution
}

// setResolution keeps k as the pod's last resolution; nil forgets it. Only
// for a record not yet stored.
func (r *podRecord) setResolution(k *keptResolution) {
	if k == nil {
		r.resolution, r.resolved = keptResolution{}, false
		return
	}
	r.resolution, r.resolved = *k, true
}

// countCreate counts one more creation of the record's pod, after n before.
func (r *podRecord) countCreate(n int) {
	r.creates = uint16(min(n+1, math.MaxUint16))
}

// newRecord returns a record of pod, whose key is key (providerutil.PodKey), with the times
// and addresses unset.
func newRecord(key string, pod *corev1.Pod) (*podRecord, error) {
	r := &podRecord{key: key}
	return r, r.setPod(pod)
}

// setPod replaces the record's pod. Only for a record not yet stored.
func (r *podRecord) setPod(pod *corev1.Pod) error {
	// Called on the pod controller's sync goroutines, each of which would
	// otherwise grow its stack for the pack (podpack.PackAside).
	packed, err := podpack.PackAside(pod)
	if err != nil {
		return errdefs.InvalidInput("mock: %v", err)
	}
	r.uid, r.packed = pod.UID, unsafe.String(unsafe.SliceData(packed), len(packed))
	return nil
}

// podIPText is the pod's address as text.
func (r *podRecord) podIPText() string {
	if r.podIP == 0 {
		return r.hostIP
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], r.podIP)
	return netip.AddrFrom4(b).String()
}

// podIPOf is the podIP of a record of hostIP whose address is text: an error
// for an address the mock does not give (neither its hostIP nor IPv4).
func podIPOf(text, hostIP string) (uint32, error) {
	if text == hostIP {
		return 0, nil
	}
	a, err := netip.ParseAddr(text)
	if err != nil || !a.Is4() || a.IsUnspecified() {
		return 0, fmt.Errorf("podIP %q is neither the pod's hostIP %q nor an IPv4 address", text, hostIP)
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:]), nil
}

// pod decodes the record's pod; the result is the caller's.
func (r *podRecord) pod() *corev1.Pod {
	pod, err := podpack.Unpack(unsafe.Slice(unsafe.StringData(r.packed), len(r.packed)))
	if err != nil {
		// The mock packed these bytes itself: failing to read them back is a bug.
		panic(fmt.Sprintf("mock: pod %s: %v", r.key, err))
	}
	return pod
}

func (r *podRecord) deleting() bool { return r.deleted != 0 }

// goneAt reports whether the pod has stopped at now, and so no longer exists.
func (r *podRecord) goneAt(now time.Time) bool {
	return r.deleting() && !now.Before(r.stopped.Time())
}

// runningAt reports whether the pod's containers have started at now.
func (r *podRecord) runningAt(now time.Time) bool { return !now.Before(r.running.Time()) }

// podAt returns a copy of the pod with its status at now.
func (r *podRecord) podAt(now time.Time) *corev1.Pod {
	pod := r.pod()
	pod.Status = podStatusAt(r, pod, now)
	return pod
}

// countsKept is how long the call counts of a pod (CreateCount, DeleteCalls,
// UpdateCalls, VolumeUpdateCalls) outlive it: long enough for a test to see a
// pod created again after it stopped, and bounded, as a mock node that runs
// for weeks under churn would otherwise keep counts of every pod it ever ran.
const countsKept = 10 * time.Minute

// gonePod is a pod dropped from memory at a time.
type gonePod struct {
	uid types.UID
	key string
	at  time.Time
}

// dropLocked forgets rec, a stopped pod, and the counts of pods gone more than
// countsKept before now.
func (p *Provider) dropLocked(rec *podRecord, now time.Time) {
	key := rec.key
	delete(p.pods, key)
	p.version++
	p.keepCreatesLocked(rec)
	p.goneLocked(rec.uid, key, now)
}

// keepCreatesLocked moves the create count of rec, a record leaving p.pods,
// to createCounts, where it outlives the pod for countsKept.
func (p *Provider) keepCreatesLocked(rec *podRecord) {
	if rec.creates > 0 {
		count(&p.createCounts, rec.uid, int(rec.creates))
	}
}

// goneLocked notes that the pod uid under key went at now, so that its counts
// are forgotten countsKept later, and forgets those of pods gone countsKept
// before now, unless the pod runs again (the same UID created anew).
func (p *Provider) goneLocked(uid types.UID, key string, now time.Time) {
	p.gone = append(p.gone, gonePod{uid: uid, key: key, at: now})
	n := 0
	for _, g := range p.gone {
		if now.Sub(g.at) < p.countsKept {
			break
		}
		n++
		if rec := p.pods[g.key]; rec != nil && rec.uid == g.uid {
			continue
		}
		delete(p.createCounts, g.uid)
		delete(p.deleteCalls, g.uid)
		delete(p.updateCalls, g.uid)
		if p.pods[g.key] == nil {
			delete(p.volumeCalls, g.key)
		}
	}
	p.gone = p.gone[n:] // the array is given back as append outgrows it
}

// lookupLocked returns the record of a pod that exists at now, or nil. A pod found
// stopped is dropped from memory, unless the scheduler runs: it must deliver the
// pod's last status first, and drops it then.
func (p *Provider) lookupLocked(key string, now time.Time) *podRecord {
	rec := p.pods[key]
	if rec == nil {
		return nil
	}
	if rec.goneAt(now) {
		if p.schedulerLocked() == nil {
			p.dropLocked(rec, now)
		}
		return nil
	}
	return rec
}

// allocIPLocked returns the next pod IP (podRecord.podIP).
func (p *Provider) allocIPLocked() uint32 {
	ip := firstPodIP + p.nextIP
	p.nextIP++
	return ip
}
