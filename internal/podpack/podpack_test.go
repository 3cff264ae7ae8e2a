package podpack

import (
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

func TestBytesThatAreNotAPackedPodAreAnError(t *testing.T) {
	raw, _ := aPod(1).Marshal()
	if _, err := Unpack(raw); err == nil {
		t.Error("a pod's plain encoding unpacked without an error")
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
