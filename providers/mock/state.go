package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/compact/unixtime"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// stateVersion is the format of the StateFile.
const stateVersion = 1

// state is the content of the StateFile: everything a restarted process needs to carry
// on as if it had not stopped. Times are absolute, so a pod whose StartDelay or
// StopDelay ran out while the process was down is found running or gone.
type state struct {
	Version      int               `json:"version"`
	NextIP       uint32            `json:"nextIP"`
	Pods         []savedPod        `json:"pods"`
	CreateCounts map[types.UID]int `json:"createCounts,omitempty"`
	DeleteCalls  map[types.UID]int `json:"deleteCalls,omitempty"`
}

type savedPod struct {
	Pod     *corev1.Pod `json:"pod"`
	PodIP   string      `json:"podIP"`
	HostIP  string      `json:"hostIP"`
	Created time.Time   `json:"created"`
	Running time.Time   `json:"running"`
	Deleted time.Time   `json:"deleted,omitzero"`
	Stopped time.Time   `json:"stopped,omitzero"`
}

// save writes the current state to the StateFile, unless a concurrent call already
// wrote it (or a later one): concurrent changes share one write. It returns once the
// state as of its call is on disk.
//
// The file is replaced by rename, so a crash never leaves it half written. It is not
// fsynced: the file must survive the process being killed, not the machine losing
// power, and an fsync per change would make the mock slow.
func (p *Provider) save() error {
	if p.cfg.StateFile == "" {
		return nil
	}
	p.mu.Lock()
	want := p.version
	p.mu.Unlock()

	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	if p.savedVersion >= want {
		return nil
	}
	p.mu.Lock()
	version := p.version
	st := state{
		Version:      stateVersion,
		NextIP:       p.nextIP,
		Pods:         make([]savedPod, 0, len(p.pods)),
		CreateCounts: make(map[types.UID]int, len(p.createCounts)),
		DeleteCalls:  make(map[types.UID]int, len(p.deleteCalls)),
	}
	recs := make([]*podRecord, 0, len(p.pods))
	for _, rec := range p.pods {
		recs = append(recs, rec)
		if rec.creates > 0 {
			st.CreateCounts[rec.uid] = int(rec.creates)
		}
	}
	for uid, n := range p.createCounts {
		st.CreateCounts[uid] = n
	}
	for uid, n := range p.deleteCalls {
		st.DeleteCalls[uid] = n
	}
	p.mu.Unlock()

	// The records are immutable: they are decoded and encoded without the lock.
	for _, rec := range recs {
		st.Pods = append(st.Pods, savedPod{
			Pod: rec.pod(), PodIP: rec.podIPText(), HostIP: rec.hostIP,
			Created: rec.created.Time(), Running: rec.running.Time(), Deleted: rec.deleted.Time(), Stopped: rec.stopped.Time(),
		})
	}
	if err := writeFileAtomic(p.cfg.StateFile, st); err != nil {
		return fmt.Errorf("mock: saving state: %w", err)
	}
	p.savedVersion = version
	return nil
}

func writeFileAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// load reads the StateFile, if it exists, into the empty provider. Pods that stopped
// while no process ran are dropped.
func (p *Provider) load() error {
	data, err := os.ReadFile(p.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mock: loading state: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("mock: loading state %s: %w", p.cfg.StateFile, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("mock: loading state %s: format version %d, want %d", p.cfg.StateFile, st.Version, stateVersion)
	}
	now := p.clock.Now()
	p.nextIP = st.NextIP
	for _, sp := range st.Pods {
		if sp.Pod == nil {
			return fmt.Errorf("mock: loading state %s: a pod entry has no pod", p.cfg.StateFile)
		}
		rec, err := newRecord(providerutil.PodKey(sp.Pod.Namespace, sp.Pod.Name), sp.Pod)
		if err != nil {
			return fmt.Errorf("mock: loading state %s: %w", p.cfg.StateFile, err)
		}
		rec.hostIP = sp.HostIP
		if rec.podIP, err = podIPOf(sp.PodIP, sp.HostIP); err != nil {
			return fmt.Errorf("mock: loading state %s: pod %s: %w", p.cfg.StateFile, rec.key, err)
		}
		rec.created, rec.running = unixtime.Of(sp.Created), unixtime.Of(sp.Running)
		rec.deleted, rec.stopped = unixtime.Of(sp.Deleted), unixtime.Of(sp.Stopped)
		if !rec.goneAt(now) {
			p.pods[rec.key] = rec
		}
	}
	byUID := make(map[types.UID]*podRecord, len(p.pods))
	for _, rec := range p.pods {
		byUID[rec.uid] = rec
	}
	for uid, n := range st.CreateCounts {
		if rec := byUID[uid]; rec != nil {
			rec.countCreate(n - 1) // the record is not shared yet
			continue
		}
		count(&p.createCounts, uid, n)
	}
	for uid, n := range st.DeleteCalls {
		count(&p.deleteCalls, uid, n)
	}
	// The counts of pods not running any more are forgotten countsKept from now
	// (the file does not say when each pod went).
	live := make(map[types.UID]bool, len(byUID))
	for uid := range byUID {
		live[uid] = true
	}
	for _, counts := range []map[types.UID]int{p.createCounts, p.deleteCalls} {
		for uid := range counts {
			if !live[uid] {
				live[uid] = true // once
				p.gone = append(p.gone, gonePod{uid: uid, at: now})
			}
		}
	}
	p.savedVersion = p.version
	p.log.Info("loaded state", "file", p.cfg.StateFile, "pods", len(p.pods))
	return nil
}
