// Package podpack keeps pods in memory in few bytes: a pod's protobuf encoding,
// compressed with S2 (github.com/klauspost/compress/s2, an extension of Snappy)
// against a dictionary of pods' encodings.
//
// A node agent holds every pod of its nodes for the pod's whole life (the pod
// controller's cache, and the mock provider's state), so its memory grows by what
// it keeps per pod. A Deployment's pod, status included, encodes to one or two KiB,
// and most of those bytes are the same in every pod: the service-account volume's
// paths and sources, the admission plugins' defaults and tolerations, the
// kubelet's condition types, the owner's and the images' names. Against a
// dictionary that holds them, a pod compresses to a few hundred bytes or less
// (this package's benchmark pod: 1,733 bytes to 136 against the static
// dictionary). Pods of one node mostly come from a few templates, and against
// a sibling a pod keeps little more than its own names, UID and times: once
// the process has packed a pod big enough, it is added to the dictionary
// (dicts), and the benchmark pod's sibling packs to 38 bytes. A pod's UID,
// random text of 36 characters, is packed as its 16 bytes (uuid.go). Packing takes
// about a microsecond, and unpacking a fraction of one, far less than the
// protobuf encoding and decoding around them (about 9 µs to decode that pod).
//
// The dictionaries are made in the process, from the pod in dictionaryPod,
// which may change from one build to the next, and from the first pod packed;
// a packed pod names its dictionary by a number of the process's and carries
// no checksum: packed bytes are readable only in the process that packed
// them, for memory, never for disk or the wire.
//
// # Why S2 and not zstd
//
// The package used zstd first (its fastest level, the same dictionary, no
// entropy coding). zstd packs smaller: 129 bytes against S2's 135 for the
// benchmark pod, 269 against 296 for the pod package's, and a pod with much text
// of its own by a quarter or more (1,921 against 2,587 bytes for one of 6 KiB
// with 40 long environment values, textPod in the tests; 540 against 909 for one
// whose 40 values are alike). But before every frame zstd's dictionary encoder
// copies its 256 KiB match table back from the dictionary's, since packing a pod
// writes to most of it. A pack took 3.3 µs in BenchmarkPack, 5.2 µs in
// BenchmarkPackCold (4 MiB of other memory touched between packs), and about
// 12 µs in a node agent holding 10,000 pods, where the copy alone took 5 % of the
// process's CPU. S2 reads the dictionary's table in place and clears a 64 KiB one
// of its own: 1.0 µs in BenchmarkPack, 1.7 µs in BenchmarkPackCold. It unpacks
// in a third to a half of zstd's time (0.4 against 0.8 µs in BenchmarkUnpackCold,
// before the protobuf decoding), and its codec keeps about 34 KiB of heap where
// zstd's kept about 700 KiB. S2's "better" encoder packs the two typical pods a
// little smaller (126 and 256 bytes) but clears 576 KiB of tables per call, 6.9
// µs a pack; its "best" clears 4.5 MiB, 76 µs. (Figures: two AMD EPYC cores, Go
// 1.26, klauspost/compress 1.19.2.)
package podpack

import (
	"fmt"

	"github.com/klauspost/compress/s2"
	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/compact/deepstack"
	"github.com/vkubelet/vkubelet/internal/compact/pack"
)

// maxEncodedPod bounds the length a packed pod may claim for its encoding:
// unpacking allocates that much before it reads a byte, and bytes this process
// did not pack may claim up to 4 GiB. No pod comes near it: etcd refuses
// requests over 1.5 MiB by default, the API server bodies over 3 MiB.
const maxEncodedPod = 64 << 20

// A packed pod is one byte that names its dictionary, then the S2 block. The
// dictionaries (internal/compact/pack) are static, the encoding of
// dictionaryPod, and the learned ones: the same followed by the encoding of the
// first pod the process packs that is big enough to teach something
// (minLearned, maxLearned), and then of up to two pods that packed poorly
// against the newest (a node's first running pod, whose status its first pod
// as created lacked). Pods of one node mostly come from a few templates (a
// Deployment's replicas, a Job's), so against a sibling a pod keeps little
// more than its names, UID and times (in a probe of 2,000 Deployment pods on
// 200 nodes, the pod cache's and the mock's packs together took 355 bytes a
// pod against 612). A pod unlike the first compresses against learned as it
// would against static, which comes first in it. Pods packed before learned
// exists keep static, so packed bytes stay readable for the process's life.
var dicts = pack.NewDictionaries("podpack", dictionaryPodEncoding, minLearned, maxLearned)

// minLearned and maxLearned bound the encodings a dictionary is learned from:
// at least a pod's worth (an empty pod encodes to a few bytes), and not so long
// that its hash table would miss most of it.
const (
	minLearned = 512
	maxLearned = 8 << 10
)

// dictionaryPodEncoding is the encoding of dictionaryPod, condensed.
func dictionaryPodEncoding() []byte {
	raw, err := dictionaryPod().Marshal()
	if err != nil {
		panic(fmt.Sprintf("podpack: encoding the dictionary pod: %v", err))
	}
	return condense(nil, raw)
}

// Pack returns the packed form of p.
func Pack(p *corev1.Pod) ([]byte, error) {
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return PackEncoded(raw), nil
}

// PackAside is Pack for callers on goroutines that live for one task, as the
// pod controller's syncs do: the pack runs on the process's aside goroutine
// (internal/compact/deepstack), whose stack has the 64 KiB S2 needs (see PackEncoded), so
// the caller's stack does not grow to 128 KiB for it. A node agent starting
// pods ran hundreds of such goroutines at once: 29 against 6 MiB of stacks
// while 10,000 pods started. The hand-over costs less than the stack growth it
// saves: 9.0 against 10.7 µs for encoding and packing a pod on a new goroutine
// (BenchmarkPackAsideOnANewGoroutine, BenchmarkPackOnANewGoroutineWithMarshal).
func PackAside(p *corev1.Pod) ([]byte, error) {
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	var packed []byte
	deepstack.Do(func() { packed = PackEncoded(raw) })
	return packed, nil
}

// PackEncoded returns the packed form of a pod already protobuf-encoded, for
// callers that read the encoding first.
//
// Any number of goroutines may pack at once. Each needs 64 KiB of stack for the
// call, where S2 keeps the hash table of the pod being packed, so a goroutine's
// stack grows to 128 KiB on its first pack and stays so until the goroutine ends
// or the collector finds the stack mostly unused and halves it. The growth costs
// about 1.5 µs (BenchmarkPackOnANewGoroutine: 2.9 µs, of which 0.3 start the
// goroutine; zstd took 5.8 µs there), paid on every pack by callers that pack on
// a fresh goroutine, as the mock provider does in the pod controller's syncs.
func PackEncoded(raw []byte) []byte {
	condensed := pack.Buffer()
	defer pack.Release(condensed)
	*condensed = condense(*condensed, raw)
	return dicts.Pack(*condensed)
}

// Unpack decodes a pod packed by this process into a new pod, the caller's.
func Unpack(packed []byte) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	// Unmarshal copies what it keeps (strings, bytes), so the buffer is free
	// again once it returns.
	if err := UnpackEncoded(packed, p.Unmarshal); err != nil {
		return nil, err
	}
	return p, nil
}

// UnpackEncoded calls use with the protobuf encoding of a pod packed by this
// process, for a caller that decodes part of it (the status alone, say). The
// bytes are valid only until use returns; its error is returned, wrapped.
//
// Bytes this process did not pack are an error, mostly: S2 checks that they
// are well formed and fill the length they claim, but nothing more.
func UnpackEncoded(packed []byte, use func(raw []byte) error) error {
	if len(packed) == 0 {
		return fmt.Errorf("unpacking pod: no bytes")
	}
	d := dicts.Of(packed[0])
	if d == nil {
		return fmt.Errorf("unpacking pod: dictionary %d unknown", packed[0])
	}
	block := packed[1:]
	n, err := s2.DecodedLen(block)
	if err != nil {
		return fmt.Errorf("unpacking pod: %w", err)
	}
	if n > maxEncodedPod {
		return fmt.Errorf("unpacking pod: %d bytes claimed, more than any pod encodes to", n)
	}
	var useErr error
	err = pack.Decompress(d, block, func(condensed []byte) {
		out := pack.Buffer()
		defer pack.Release(out)
		raw, err := expand(*out, condensed)
		if err != nil {
			useErr = fmt.Errorf("unpacking pod: %w", err)
			return
		}
		*out = raw
		if err := use(raw); err != nil {
			useErr = fmt.Errorf("decoding unpacked pod: %w", err)
		}
	})
	if err != nil {
		return fmt.Errorf("unpacking pod: %w", err)
	}
	return useErr
}
