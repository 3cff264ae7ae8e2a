package podpack

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/compact/pack"
	"github.com/vkubelet/vkubelet/internal/compact/uuidbytes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// aPod is a pod unlike the dictionary's in its names, so that what a test sees
// is not the dictionary coming back.
func aPod(i int) *corev1.Pod {
	p := dictionaryPod()
	p.Name, p.Namespace = fmt.Sprintf("shop-6c4d-%05d", i), "shop"
	p.UID = types.UID(fmt.Sprintf("uid-%d", i))
	p.Spec.NodeName = fmt.Sprintf("virtual-%d", i%7)
	p.Spec.Containers[0].Image = "ghcr.io/example/shop:v1.4.2"
	p.Status.PodIP = fmt.Sprintf("10.1.%d.%d", i/256, i%256)
	return p
}

func TestAPackedPodUnpacksToTheSamePod(t *testing.T) {
	for _, p := range []*corev1.Pod{aPod(1), dictionaryPod(), {}, {ObjectMeta: metav1.ObjectMeta{Name: "bare"}}} {
		packed, err := Pack(p)
		if err != nil {
			t.Fatalf("Pack %q: %v", p.Name, err)
		}
		got, err := Unpack(packed)
		if err != nil {
			t.Fatalf("Unpack %q: %v", p.Name, err)
		}
		if !equality.Semantic.DeepEqual(got, p) {
			t.Errorf("pod %q unpacked differs:\n got %+v\nwant %+v", p.Name, got, p)
		}
	}
}

// The point of the package: a typical pod keeps well under half its encoding.
func TestATypicalPodPacksSmall(t *testing.T) {
	p := aPod(42)
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	packed := PackEncoded(raw)
	t.Logf("encoded %d bytes, packed %d", len(raw), len(packed))
	if len(packed)*3 > len(raw) {
		t.Errorf("a typical pod of %d bytes packed to %d, more than a third", len(raw), len(packed))
	}
	if cap(packed) > len(packed)+16 {
		t.Errorf("packed bytes keep a capacity of %d for %d bytes", cap(packed), len(packed))
	}
}

// textPod is a pod with much text of its own, which the dictionary cannot
// have: 40 long environment values, about 6 KiB encoded.
func textPod() *corev1.Pod {
	p := aPod(3)
	words := strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu")
	for i := range 40 {
		var v strings.Builder
		for j := 0; v.Len() < 85; j++ {
			fmt.Fprintf(&v, "%s-%d/", words[(i*7+j*3)%len(words)], (i*31+j*17)%1000)
		}
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%02d_VALUE", i), Value: v.String()})
	}
	return p
}

// A pod whose text the dictionary does not have still packs, on what repeats
// within it, to well under its encoding.
func TestAPodWithTextOfItsOwnPacksToLessThanHalf(t *testing.T) {
	p := textPod()
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	packed := PackEncoded(raw)
	t.Logf("encoded %d bytes, packed %d", len(raw), len(packed))
	if len(packed)*2 > len(raw) {
		t.Errorf("a pod of %d bytes with much text of its own packed to %d, more than half", len(raw), len(packed))
	}
	got, err := Unpack(packed)
	if err != nil || !equality.Semantic.DeepEqual(got, p) {
		t.Errorf("the pod came back as %+v, %v", got, err)
	}
}

func TestBytesThatAreNotAPackedPodAreAnError(t *testing.T) {
	raw, _ := aPod(1).Marshal()
	if _, err := Unpack(raw); err == nil {
		t.Error("a pod's plain encoding unpacked without an error")
	}
	if _, err := Unpack(nil); err == nil {
		t.Error("no bytes at all unpacked without an error")
	}
	packed, _ := Pack(aPod(1))
	packed[0] = 7
	if _, err := Unpack(packed); err == nil {
		t.Error("bytes naming a dictionary there is none of unpacked without an error")
	}
	// Bytes that claim more than any pod encodes to are refused before
	// anything is allocated for them.
	huge := binary.AppendUvarint([]byte{pack.Static}, maxEncodedPod+1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := UnpackEncoded(huge, func([]byte) error { return nil })
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Error("bytes claiming more than any pod encodes to unpacked without an error")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("refusing bytes that claim %d bytes allocated %d", maxEncodedPod+1, n)
	}
}

func TestPackAndUnpackConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				p := aPod(g*100 + i)
				packed, err := Pack(p)
				if err != nil {
					t.Error(err)
					return
				}
				// PackAside packs as Pack does, from many goroutines at once.
				if aside, err := PackAside(p); err != nil || !bytes.Equal(aside, packed) {
					t.Errorf("pod %s: PackAside gave %x, %v; Pack %x", p.Name, aside, err, packed)
					return
				}
				got, err := Unpack(packed)
				if err != nil || got.Name != p.Name || got.Status.PodIP != p.Status.PodIP {
					t.Errorf("pod %s came back as %v, %v", p.Name, got.GetName(), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzPackEncoded packs any bytes, not only a pod's encoding: they come back
// the same.
func FuzzPackEncoded(f *testing.F) {
	for _, p := range []*corev1.Pod{aPod(1), textPod(), {}} {
		raw, _ := p.Marshal()
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		packed := PackEncoded(raw)
		if err := UnpackEncoded(packed, func(got []byte) error {
			if !bytes.Equal(got, raw) {
				t.Errorf("%d bytes came back as %d different ones", len(raw), len(got))
			}
			return nil
		}); err != nil {
			t.Fatalf("unpacking what was just packed: %v", err)
		}
	})
}

// FuzzUnpackEncoded unpacks bytes that were not packed: an error, or some bytes,
// never a panic nor an allocation beyond maxEncodedPod.
func FuzzUnpackEncoded(f *testing.F) {
	for _, p := range []*corev1.Pod{aPod(1), {}} {
		raw, _ := p.Marshal()
		f.Add(raw)
		packed := PackEncoded(raw)
		f.Add(packed)
		f.Add(packed[:len(packed)/2])
	}
	f.Fuzz(func(t *testing.T, packed []byte) {
		_ = UnpackEncoded(packed, func(raw []byte) error {
			if len(raw) > maxEncodedPod {
				t.Errorf("unpacked %d bytes, more than maxEncodedPod", len(raw))
			}
			return nil
		})
	})
}

func BenchmarkPack(b *testing.B) {
	p := aPod(7)
	raw, _ := p.Marshal()
	b.ReportAllocs()
	for b.Loop() {
		PackEncoded(raw)
	}
}

func BenchmarkUnpack(b *testing.B) {
	packed, _ := Pack(aPod(7))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unpack(packed); err != nil {
			b.Fatal(err)
		}
	}
}

// evict touches 4 MiB of memory that is not the codec's, more than this
// machine's L2 cache, so that what the codec reads next comes from further
// away: a pack in a busy process, between other work, is not the loop of a
// microbenchmark.
func evict() {
	for i := 0; i < len(evictee); i += 64 {
		evictee[i]++
	}
}

var evictee = make([]byte, 4<<20)

// BenchmarkPackCold times packs alone, each after evict; the time per pack is
// reported as cold-ns/op (ns/op includes the eviction).
func BenchmarkPackCold(b *testing.B) {
	raw, _ := aPod(7).Marshal()
	benchmarkCold(b, func() { PackEncoded(raw) })
}

// BenchmarkUnpackCold is BenchmarkPackCold's unpacking, without the protobuf
// decoding.
func BenchmarkUnpackCold(b *testing.B) {
	packed, _ := Pack(aPod(7))
	benchmarkCold(b, func() {
		if err := UnpackEncoded(packed, func([]byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	})
}

func benchmarkCold(b *testing.B, op func()) {
	op() // the dictionary's table, made once
	var spent time.Duration
	n := 0
	for b.Loop() {
		evict()
		start := time.Now()
		op()
		spent += time.Since(start)
		n++
	}
	b.ReportMetric(float64(spent.Nanoseconds())/float64(n), "cold-ns/op")
}

// BenchmarkPackOnANewGoroutine is a pack on a goroutine that never packed
// before, as each of the pod controller's syncs is: its stack grows for S2's
// 64 KiB frame. BenchmarkNewGoroutine is the same without the pack.
func BenchmarkPackOnANewGoroutine(b *testing.B) {
	raw, _ := aPod(7).Marshal()
	benchmarkOnANewGoroutine(b, func() { PackEncoded(raw) })
}

func BenchmarkPackAsideOnANewGoroutine(b *testing.B) {
	p := aPod(7)
	benchmarkOnANewGoroutine(b, func() {
		if _, err := PackAside(p); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkPackOnANewGoroutineWithMarshal is Pack where PackAside runs, for
// comparison: both encode the pod first.
func BenchmarkPackOnANewGoroutineWithMarshal(b *testing.B) {
	p := aPod(7)
	benchmarkOnANewGoroutine(b, func() {
		if _, err := Pack(p); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkNewGoroutine(b *testing.B) { benchmarkOnANewGoroutine(b, func() {}) }

func benchmarkOnANewGoroutine(b *testing.B, op func()) {
	b.ReportAllocs()
	for b.Loop() {
		done := make(chan struct{})
		go func() {
			op()
			close(done)
		}()
		<-done
	}
}

// The first pod big enough teaches the dictionary its siblings pack against;
// pods packed before it, against the static one, stay readable.
func TestPodsPackSmallerAgainstTheFirstPodAndStayReadable(t *testing.T) {
	// The test makes the process's learned dictionary anew: it puts the one
	// it found back, for the bytes other tests packed against it.
	t.Cleanup(dicts.Relearn())

	small := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	first, second := aPod(1), aPod(2)
	var packs [][]byte
	for _, p := range []*corev1.Pod{small, first, second} {
		packed, err := Pack(p)
		if err != nil {
			t.Fatal(err)
		}
		packs = append(packs, packed)
	}
	if packs[0][0] != pack.Static || packs[1][0] != pack.Learned || packs[2][0] != pack.Learned {
		t.Fatalf("dictionaries %d, %d, %d; want static for the small pod, learned from the first big one on", packs[0][0], packs[1][0], packs[2][0])
	}
	raw, _ := second.Marshal()
	againstStatic := len(dicts.Of(pack.Static).Encode(nil, raw)) + 1
	t.Logf("a sibling of the first pod: %d bytes encoded, %d packed against the learned dictionary, %d against the static one", len(raw), len(packs[2]), againstStatic)
	if len(packs[2]) >= againstStatic {
		t.Errorf("a sibling of the first pod packs to %d bytes against the learned dictionary, %d against the static one", len(packs[2]), againstStatic)
	}
	for i, p := range []*corev1.Pod{small, first, second} {
		got, err := Unpack(packs[i])
		if err != nil {
			t.Fatalf("Unpack %q: %v", p.Name, err)
		}
		if !equality.Semantic.DeepEqual(got, p) {
			t.Errorf("pod %q unpacked differs", p.Name)
		}
	}
}

// A pod's UID is random text: condensed, it costs its 16 bytes and a few, where
// S2 alone would keep its 36 characters and those few (44 bytes in all).
func TestAPodsUIDCostsItsBytesNotItsText(t *testing.T) {
	p := aPod(7)
	p.UID = ""
	without, err := Pack(p)
	if err != nil {
		t.Fatal(err)
	}
	p.UID = "5f0c7a2e-93b1-4d6e-b8a4-2c71e9d03f58"
	with, err := Pack(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("packed %d bytes with the UID, %d without", len(with), len(without))
	// Its bytes, the escape, the field's tag, and a copy split in two.
	if cost := len(with) - len(without); cost >= uuidbytes.TextLen-6 {
		t.Errorf("the UID costs %d bytes of the pack, want fewer than %d", cost, uuidbytes.TextLen-6)
	}
	if got, err := Unpack(with); err != nil || got.UID != p.UID {
		t.Fatalf("unpacked UID %q, %v", got.UID, err)
	}
}

func TestCondensedEncodingsExpandToThemselves(t *testing.T) {
	uuid := "5f0c7a2e-93b1-4d6e-b8a4-2c71e9d03f58"
	for _, raw := range []string{
		"",
		"\x2a\x24" + uuid + "\x10\x01",
		"\xff\xff\x24\xff" + uuid,      // escapes about
		"\x24" + uuid[:35],             // cut short
		"\x24" + strings.ToUpper(uuid), // not as uuidbytes writes it
		"\x24\x24" + uuid + "\x24" + uuid + "\xff\x01", // one after another
	} {
		c := condense(nil, []byte(raw))
		got, err := expand(nil, c)
		if err != nil || string(got) != raw {
			t.Errorf("%q: condensed to %q, expanded to %q, %v", raw, c, got, err)
		}
	}
	for _, bad := range []string{"\xff", "\xff\x02", "\xff\x01\x00"} {
		if _, err := expand(nil, []byte(bad)); err == nil {
			t.Errorf("%q expanded without an error", bad)
		}
	}
}

func FuzzCondense(f *testing.F) {
	f.Add([]byte("\x2a\x245f0c7a2e-93b1-4d6e-b8a4-2c71e9d03f58\xff"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := expand(nil, condense(nil, raw))
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%q expanded to %q, %v", raw, got, err)
		}
	})
}

// runningPod is createdPod(i) as a provider unlike the dictionary pod's
// kubelet reports it running.
func runningPod(i int) *corev1.Pod {
	p := createdPod(i)
	p.Status = aPod(i).Status
	at := metav1.NewTime(time.Date(2026, 11, 28, 0, 21, 29+i%3, 0, time.UTC))
	p.Status.StartTime = &at
	for c := range p.Status.Conditions {
		p.Status.Conditions[c].LastTransitionTime = at
		p.Status.Conditions[c].ObservedGeneration = 1
	}
	p.Status.ObservedGeneration = 1
	p.Status.HostIP, p.Status.HostIPs = "192.168.17.4", []corev1.HostIP{{IP: "192.168.17.4"}}
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "example://" + c.Image,
			ContainerID: fmt.Sprintf("example://%s/%s", p.UID, c.Name), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
		})
	}
	return p
}

// createdPod is aPod(i), with a second container, as the API server first
// stores it.
func createdPod(i int) *corev1.Pod {
	p := aPod(i)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log-shipper", Image: "ghcr.io/example/log-shipper:v0.9.1"})
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: p.Status.QOSClass}
	return p
}

// A node's first pod is learned as created; the first that runs teaches the
// next dictionary, against which its running siblings pack smaller, while
// pods as created pack as small as before.
func TestRunningPodsPackAgainstARunningSibling(t *testing.T) {
	t.Cleanup(dicts.Relearn())
	packed := func(p *corev1.Pod) []byte {
		t.Helper()
		b, err := Pack(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unpack(b)
		if err != nil || !equality.Semantic.DeepEqual(got, p) {
			t.Fatalf("pod %s came back as %+v, %v", p.Name, got, err)
		}
		return b
	}
	packed(createdPod(1))
	rawCreated, _ := createdPod(2).Marshal()
	createdAgainstFirst := len(dicts.Of(pack.Learned).Encode(nil, condense(nil, rawCreated))) + 1
	rawRunning, _ := runningPod(2).Marshal()
	runningAgainstFirst := len(dicts.Of(pack.Learned).Encode(nil, condense(nil, rawRunning))) + 1
	if first := packed(runningPod(1)); first[0] != pack.Learned+1 {
		t.Fatalf("the first running pod was packed against dictionary %d", first[0])
	}
	running, created := packed(runningPod(2)), packed(createdPod(2))
	t.Logf("a running sibling: %d bytes encoded, %d packed, %d against the first learned dictionary; as created %d, %d", len(rawRunning), len(running), runningAgainstFirst, len(created), createdAgainstFirst)
	if running[0] != pack.Learned+1 || len(running)*3 > runningAgainstFirst*2 {
		t.Errorf("a running sibling packed against %d to %d bytes, %d against the first learned dictionary", running[0], len(running), runningAgainstFirst)
	}
	if len(created) > createdAgainstFirst+8 {
		t.Errorf("a sibling as created packs to %d bytes, %d against the first learned dictionary", len(created), createdAgainstFirst)
	}
}
