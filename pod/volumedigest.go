package pod

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"

	"github.com/vkubelet/vkubelet/provider"
)

// volumesDigest stands for the volume files last handed to the provider. The
// controller keeps it, not the files, to tell whether a new resolution changed
// anything: the files of a pod with a service-account token are over a kilobyte,
// and the provider has them already. The zero value stands for no volumes.
//
// It is the first half of a SHA-256: one per pod, 16 bytes fewer, and two
// resolutions of a pod whose files differ still differ in it but with a chance
// of 2^-128.
type volumesDigest [sha256.Size / 2]byte

// digestVolumes returns the digest of vols: equal for equal files (names, paths,
// modes, bytes), whatever the order of the map. A nil map, an empty one and a
// nil VolumeContents count as no files, as equality.Semantic.DeepEqual has it.
func digestVolumes(vols map[string]*provider.VolumeContents) volumesDigest {
	if len(vols) == 0 {
		return volumesDigest{}
	}
	names := make([]string, 0, len(vols))
	for name := range vols {
		names = append(names, name)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		// Every field is written with its length first, so that no two different
		// sets of files give the same stream of bytes.
		writeField(h, []byte(name))
		var files []provider.VolumeFile
		if v := vols[name]; v != nil {
			files = v.Files
		}
		writeUint(h, uint64(len(files)))
		for _, f := range files {
			writeField(h, []byte(f.Path))
			writeUint(h, uint64(uint32(f.Mode)))
			writeField(h, f.Data)
		}
	}
	var sum [sha256.Size]byte
	var d volumesDigest
	copy(d[:], h.Sum(sum[:0]))
	return d
}

func writeUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h.Write(b[:])
}

func writeField(h hash.Hash, b []byte) {
	writeUint(h, uint64(len(b)))
	h.Write(b)
}
