package node

import (
	"fmt"
	"runtime"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/compact/deepstack"
	"github.com/vkubelet/vkubelet/internal/compact/pack"
)

// The desired Node of a controller that shares a Watch (a NodeSet's node) is
// kept packed (internal/compact/pack's Pack): one byte naming the dictionary,
// then the S2 block of its encoding. A NodeSet's nodes differ in little more than
// their names, addresses and ports, so against the first node's encoding
// another's (some 1,000 bytes) packs to a tenth of it. A node alone keeps its
// encoding as it is: a dictionary's hash table (32 KiB) would cost it more
// than packing saves.
var desiredDicts = pack.NewDictionaries("node", typicalDesiredNode, minLearnedNode, maxLearnedNode)

// minLearnedNode and maxLearnedNode bound the encodings a dictionary is
// learned from: a Node's worth at least, and short enough for the hash table.
const (
	minLearnedNode = 256
	maxLearnedNode = 8 << 10
)

// typicalDesiredNode is the encoding of a virtual node as configured by
// default, the static dictionary.
func typicalDesiredNode() []byte {
	n := desiredNode(Config{NodeName: "virtual-node", OperatingSystem: "linux", Architecture: runtime.GOARCH,
		KubeletVersion: "v1.0.0", ProviderName: "provider", InternalIP: "10.0.0.1", KubeletPort: 10250})
	raw, err := n.Marshal()
	if err != nil {
		panic(fmt.Sprintf("node: encoding the typical node: %v", err))
	}
	return raw
}

// packDesired packs raw, a desired Node's encoding. S2 needs 64 KiB of stack
// to compress, so it runs on the process's deep-stack goroutine rather than
// grow the node's.
func packDesired(raw []byte) []byte {
	var packed []byte
	deepstack.Do(func() { packed = desiredDicts.Pack(raw) })
	return packed
}

// unpackDesired decodes a desired Node packDesired packed into n.
func unpackDesired(packed []byte, n *corev1.Node) error {
	if len(packed) == 0 {
		return fmt.Errorf("no bytes")
	}
	dict := desiredDicts.Of(packed[0])
	if dict == nil {
		return fmt.Errorf("dictionary %d unknown", packed[0])
	}
	var err error
	if derr := pack.Decompress(dict, packed[1:], func(raw []byte) { err = n.Unmarshal(raw) }); derr != nil {
		return derr
	}
	return err
}
