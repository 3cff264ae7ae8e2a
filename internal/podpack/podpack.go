// Package podpack keeps pods in memory in few bytes: a pod's protobuf encoding,
// compressed with zstd against a dictionary that is itself the encoding of a
// typical pod.
//
// A node agent holds every pod of its nodes for the pod's whole life (the pod
// controller's cache, and the mock provider's state), so its memory grows by what
// it keeps per pod. A Deployment's pod, status included, encodes to about 1.4 KiB,
// and most of those bytes are the same in every pod: the service-account volume's
// paths and sources, the admission plugins' defaults and tolerations, the
// kubelet's condition types, the owner's and the images' names. Against a
// dictionary that holds them, a pod compresses to a few hundred bytes or less;
// decompressing costs a few microseconds, less than decoding the protobuf that
// follows.
//
// The dictionary is built once per process from the pod in dictionaryPod, so a
// packed pod is readable only in the process that packed it: packed bytes are for
// memory, never for disk or the wire.
package podpack

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
	corev1 "k8s.io/api/core/v1"
)

// dictionaryID names the dictionary in each frame; any value would do, as only
// this process reads the frames.
const dictionaryID = 1

// codec is the process's encoder and decoder, made on first use: together they
// hold about a MiB once a pod has been packed (zstd's match tables), which a
// process that never packs a pod need not pay.
var codec = sync.OnceValues(func() (*zstd.Encoder, *zstd.Decoder) {
	dict, err := dictionaryPod().Marshal()
	if err != nil {
		panic(fmt.Sprintf("podpack: encoding the dictionary pod: %v", err))
	}
	// The concurrency of each is the number of frames packed or unpacked at
	// once (EncodeAll and DecodeAll wait for a free state beyond it). An
	// encoder's state is most of the codec's memory, about 850 KiB, and a pod
	// packs in a few microseconds once per event of the pod watch: one will do.
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderDictRaw(dictionaryID, dict),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true),
		// A checksum guards data that travels; these bytes stay in memory.
		zstd.WithEncoderCRC(false),
		// A pod's literals (names, UIDs, what the dictionary does not have) are
		// too few for Huffman coding to pay: the encoder built the tables and
		// then mostly stored the literals raw anyway. Without it packing takes
		// half the time (about 3.4 against 7.1 µs for the package's benchmark
		// pod) for the same size (129 bytes; 269 for the pod package's). A pod
		// with much text of its own packs larger: 684 bytes against 564 for one
		// of 6 KiB with 40 long environment values.
		zstd.WithNoEntropyCompression(true),
		// Pods are small: a window of 32 KiB holds the dictionary and the pod,
		// and keeps each encoder's buffers small.
		zstd.WithWindowSize(1<<15))
	if err != nil {
		panic(fmt.Sprintf("podpack: making the encoder: %v", err))
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderDictRaw(dictionaryID, dict),
		zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(fmt.Sprintf("podpack: making the decoder: %v", err))
	}
	return enc, dec
})

// Pack returns the packed form of p.
func Pack(p *corev1.Pod) ([]byte, error) {
	raw, err := p.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return PackEncoded(raw), nil
}

// scratch holds buffers for the bytes in between: frames are compressed into
// one before they are copied out at their size (a packed pod is kept for long,
// and spare capacity in it would be kept with it), and decompressed into one
// before they are decoded.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// PackEncoded returns the packed form of a pod already protobuf-encoded, for
// callers that read the encoding first.
func PackEncoded(raw []byte) []byte {
	enc, _ := codec()
	buf := scratch.Get().(*[]byte)
	*buf = enc.EncodeAll(raw, (*buf)[:0])
	packed := append([]byte(nil), *buf...)
	scratch.Put(buf)
	return packed
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
func UnpackEncoded(packed []byte, use func(raw []byte) error) error {
	_, dec := codec()
	buf := scratch.Get().(*[]byte)
	defer scratch.Put(buf)
	raw, err := dec.DecodeAll(packed, (*buf)[:0])
	if err != nil {
		return fmt.Errorf("unpacking pod: %w", err)
	}
	*buf = raw
	if err := use(raw); err != nil {
		return fmt.Errorf("decoding unpacked pod: %w", err)
	}
	return nil
}
